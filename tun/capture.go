package tun

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// CaptureConfig configures a capture tap. Capturing is off unless a Capture
// is created and handed to the datapath.
type CaptureConfig struct {
	// Path of the current capture file. Rotated files are Path.1 (newest)
	// to Path.N (oldest). Required.
	Path string
	// MaxBytes is the size at which the current file is rotated; 0 means
	// 64 MiB.
	MaxBytes int64
	// MaxFiles is the number of rotated files kept besides the current one;
	// 0 means 4.
	MaxFiles int
	// SnapLen is the number of bytes kept of each packet; 0 means MaxMTU.
	SnapLen int
}

// Capture writes packets to pcap files (link type RAW: each record is an
// IPv4 or IPv6 packet), rotating by size. WritePacket is safe for concurrent
// use; records are buffered and reach the file on rotation, Flush or Close.
type Capture struct {
	cfg CaptureConfig

	mu      sync.Mutex
	f       *os.File
	bw      *bufio.Writer
	w       *pcapgo.Writer
	size    int64
	packets uint64
	closed  bool
}

const pcapFileHeaderLen, pcapRecordHeaderLen = 24, 16

// NewCapture creates (truncates) cfg.Path and writes the pcap file header.
func NewCapture(cfg CaptureConfig) (*Capture, error) {
	if cfg.Path == "" {
		return nil, errors.New("capture: no file path given: set CaptureConfig.Path")
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = 4
	}
	if cfg.SnapLen == 0 {
		cfg.SnapLen = MaxMTU
	}
	if cfg.MaxBytes < pcapFileHeaderLen+pcapRecordHeaderLen || cfg.MaxFiles < 0 || cfg.SnapLen < 0 {
		return nil, fmt.Errorf("capture %s: invalid limits (max bytes %d, max files %d, snaplen %d): use positive values",
			cfg.Path, cfg.MaxBytes, cfg.MaxFiles, cfg.SnapLen)
	}
	c := &Capture{cfg: cfg}
	if err := c.open(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Capture) open() error {
	f, err := os.OpenFile(c.cfg.Path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("capture: %w; choose a writable path", err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	w := pcapgo.NewWriter(bw)
	if err := w.WriteFileHeader(uint32(c.cfg.SnapLen), layers.LinkTypeRaw); err != nil {
		f.Close()
		return fmt.Errorf("capture %s: write header: %w", c.cfg.Path, err)
	}
	c.f, c.bw, c.w, c.size = f, bw, w, pcapFileHeaderLen
	return nil
}

// WritePacket appends one packet (an IP packet, starting with its IP header)
// captured at ts. pkt is not retained. After Close it returns os.ErrClosed.
func (c *Capture) WritePacket(ts time.Time, pkt []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return os.ErrClosed
	}
	keep := min(len(pkt), c.cfg.SnapLen)
	rec := int64(pcapRecordHeaderLen + keep)
	if c.size+rec > c.cfg.MaxBytes && c.size > pcapFileHeaderLen {
		if err := c.rotate(); err != nil {
			return err
		}
	}
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: keep, Length: len(pkt)}
	if err := c.w.WritePacket(ci, pkt[:keep]); err != nil {
		return fmt.Errorf("capture %s: %w", c.cfg.Path, err)
	}
	c.size += rec
	c.packets++
	return nil
}

// rotate closes the current file, shifts Path.i to Path.i+1 (dropping the
// oldest) and starts a new current file. Called with c.mu held.
func (c *Capture) rotate() error {
	if err := c.closeFile(); err != nil {
		return err
	}
	if c.cfg.MaxFiles == 0 {
		return c.open()
	}
	p := c.cfg.Path
	os.Remove(fmt.Sprintf("%s.%d", p, c.cfg.MaxFiles))
	for i := c.cfg.MaxFiles - 1; i >= 1; i-- {
		os.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1))
	}
	if err := os.Rename(p, p+".1"); err != nil {
		return fmt.Errorf("capture: rotate: %w", err)
	}
	return c.open()
}

func (c *Capture) closeFile() error {
	ferr := c.bw.Flush()
	cerr := c.f.Close()
	if err := errors.Join(ferr, cerr); err != nil {
		return fmt.Errorf("capture %s: %w", c.cfg.Path, err)
	}
	return nil
}

// Packets returns the number of packets written so far.
func (c *Capture) Packets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.packets
}

// Flush writes buffered records to the current file.
func (c *Capture) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return os.ErrClosed
	}
	return c.bw.Flush()
}

// Close flushes and closes the current file. It is idempotent.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.closeFile()
}
