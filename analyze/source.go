package analyze

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/google/gopacket/pcapgo"
)

// ErrNotCapture is returned (wrapped) when a file is neither pcap nor pcapng.
var ErrNotCapture = errors.New("not a pcap or pcapng capture")

// maxFrame bounds the captured length of one frame (and of one pcapng block).
// It keeps a corrupt length field from making the reader allocate gigabytes;
// 1 MiB is far above the largest GRO/TSO super-packet Linux captures.
const maxFrame = 1 << 20

// source yields captured frames one at a time. The returned slice is valid
// until the next call to next.
type source interface {
	next() (frame []byte, link uint32, tsNanos int64, origLen int, err error)
}

// openSource detects the capture format of r (pcap, pcapng, either gzipped)
// and returns a frame source over it.
func openSource(r io.Reader) (source, string, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, "", fmt.Errorf("read capture header: %w (is the file empty or truncated?)", ErrNotCapture)
	}
	if magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, "", fmt.Errorf("open gzip-compressed capture: %w", err)
		}
		src, format, err := openSource(zr)
		return src, format + "+gzip", err
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0x0a0d0d0a:
		g := &ngGuard{r: br}
		ng, err := pcapgo.NewNgReader(g, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, "", fmt.Errorf("read pcapng section header: %w", err)
		}
		return &ngSource{r: ng, g: g}, "pcapng", nil
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1:
		hdr := make([]byte, 24)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return nil, "", fmt.Errorf("read pcap file header: %w", err)
		}
		// pcapgo sizes its frame buffer from the snap length in the header:
		// substitute a sane bound so a corrupt header cannot exhaust memory.
		// Frames longer than maxFrame are then reported as errors.
		order := binary.ByteOrder(binary.LittleEndian)
		if magic[0] == 0xa1 { // a1b2c3d4 / a1b23c4d stored big-endian
			order = binary.BigEndian
		}
		snap := order.Uint32(hdr[16:20])
		order.PutUint32(hdr[16:20], min(max(snap, 256<<10), maxFrame))
		// gopacket's LinkType is 8 bits wide: read the real (32-bit) value
		// here so link types above 255, such as SLL2 (276), survive.
		link := order.Uint32(hdr[20:24])
		pr, err := pcapgo.NewReader(io.MultiReader(bytes.NewReader(hdr), br))
		if err != nil {
			return nil, "", fmt.Errorf("read pcap file header: %w", err)
		}
		return &pcapSource{r: pr, link: link}, "pcap", nil
	}
	return nil, "", fmt.Errorf("file starts with % x: %w (expected pcap magic a1b2c3d4 or pcapng 0a0d0d0a)", magic, ErrNotCapture)
}

type pcapSource struct {
	r    *pcapgo.Reader
	link uint32
}

func (s *pcapSource) next() (frame []byte, link uint32, ts int64, origLen int, err error) {
	defer recoverAsError(&err)
	data, ci, err := s.r.ZeroCopyReadPacketData()
	if err != nil {
		return nil, 0, 0, 0, err
	}
	return data, s.link, ci.Timestamp.UnixNano(), ci.Length, nil
}

type ngSource struct {
	r *pcapgo.NgReader
	g *ngGuard // knows the interfaces' full 16-bit link types
}

func (s *ngSource) next() (frame []byte, link uint32, ts int64, origLen int, err error) {
	defer recoverAsError(&err)
	data, ci, err := s.r.ZeroCopyReadPacketData()
	if err != nil {
		return nil, 0, 0, 0, err
	}
	if ci.InterfaceIndex < 0 || ci.InterfaceIndex >= len(s.g.links) {
		return nil, 0, 0, 0, fmt.Errorf("packet refers to interface %d, which the section does not describe", ci.InterfaceIndex)
	}
	return data, s.g.links[ci.InterfaceIndex], ci.Timestamp.UnixNano(), ci.Length, nil
}

// recoverAsError turns a panic inside the capture reader library (it has a
// few on corrupt pcapng options) into an error, so that a bad file ends the
// read with a message instead of crashing the analyser.
func recoverAsError(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("capture reader failed on corrupt data: %v", r)
	}
}

// ngGuard sits between the file and pcapgo's NgReader and checks each block's
// length fields before the reader trusts them: a block length below the
// minimum for its type, not a multiple of 4, above maxFrame, or a packet
// whose captured length exceeds its block, ends the stream with an error.
type ngGuard struct {
	r         io.Reader
	bigEndian bool
	remaining int    // bytes of the current block still to pass through
	pending   []byte // block header bytes already read, not yet passed on
	hdr       [28]byte
	blocks    int
	offset    int64
	links     []uint32 // link type of each interface in the current section
}

// Minimum total lengths of pcapng block types (header, fixed fields, trailer).
var ngMinLen = map[uint32]uint32{
	0x0a0d0d0a: 28, // section header
	1:          20, // interface description
	2:          32, // packet (obsolete)
	3:          16, // simple packet
	5:          24, // interface statistics
	6:          32, // enhanced packet
}

func (g *ngGuard) Read(p []byte) (int, error) {
	if len(g.pending) == 0 && g.remaining == 0 {
		if err := g.nextBlock(); err != nil {
			return 0, err
		}
	}
	if len(g.pending) > 0 {
		n := copy(p, g.pending)
		g.pending = g.pending[n:]
		return n, nil
	}
	if len(p) > g.remaining {
		p = p[:g.remaining]
	}
	n, err := g.r.Read(p)
	g.remaining -= n
	g.offset += int64(n)
	if err == io.EOF && g.remaining > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (g *ngGuard) nextBlock() error {
	h := g.hdr[:8]
	if _, err := io.ReadFull(g.r, h); err != nil {
		return err // io.EOF at a block boundary is the normal end
	}
	typ := binary.LittleEndian.Uint32(h[0:4])
	fixed := 8
	if typ == 0x0a0d0d0a {
		if _, err := io.ReadFull(g.r, g.hdr[8:12]); err != nil {
			return g.fail(typ, "section header cut short")
		}
		switch {
		case binary.BigEndian.Uint32(g.hdr[8:12]) == 0x1a2b3c4d:
			g.bigEndian = true
		case binary.LittleEndian.Uint32(g.hdr[8:12]) == 0x1a2b3c4d:
			g.bigEndian = false
		default:
			return g.fail(typ, "bad byte-order magic")
		}
		fixed = 12
	}
	var order binary.ByteOrder = binary.LittleEndian
	if g.bigEndian {
		order = binary.BigEndian
	}
	typ = order.Uint32(h[0:4])
	length := order.Uint32(h[4:8])
	if min := ngMinLen[typ]; length < max(min, 12) || length%4 != 0 || length > maxFrame+64 {
		return g.fail(typ, fmt.Sprintf("block length %d is invalid", length))
	}
	switch typ {
	case 0x0a0d0d0a:
		g.links = g.links[:0]
	case 1: // interface description: remember the full link type
		if _, err := io.ReadFull(g.r, g.hdr[8:16]); err != nil {
			return g.fail(typ, "interface block cut short")
		}
		g.links = append(g.links, uint32(order.Uint16(g.hdr[8:10])))
		// pcapgo sizes its frame buffer from the snap length: bound it.
		if snap := order.Uint32(g.hdr[12:16]); snap > maxFrame {
			order.PutUint32(g.hdr[12:16], maxFrame)
		}
		fixed = 16
	case 2, 6: // (enhanced) packet: captured length must fit in the block
		if _, err := io.ReadFull(g.r, g.hdr[8:28]); err != nil {
			return g.fail(typ, "packet block cut short")
		}
		if caplen := order.Uint32(g.hdr[20:24]); caplen > length-32 {
			return g.fail(typ, fmt.Sprintf("captured length %d exceeds block length %d", caplen, length))
		}
		fixed = 28
	case 3: // simple packet: original length is the captured length
		if _, err := io.ReadFull(g.r, g.hdr[8:12]); err != nil {
			return g.fail(typ, "packet block cut short")
		}
		if orig := order.Uint32(g.hdr[8:12]); orig > length-16 {
			return g.fail(typ, fmt.Sprintf("simple packet length %d exceeds block length %d", orig, length))
		}
		fixed = 12
	}
	g.pending = g.hdr[:fixed]
	g.remaining = int(length) - fixed
	g.blocks++
	g.offset += int64(fixed)
	return nil
}

func (g *ngGuard) fail(typ uint32, what string) error {
	return fmt.Errorf("corrupt pcapng block %d (type %#x) near byte %d: %s", g.blocks+1, typ, g.offset, what)
}
