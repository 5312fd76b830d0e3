package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/wanopt/wanopt/bench/lab"
)

// Capture is a tcpdump writing the headers of every packet on one lab
// host's device to a pcap file, for 'wanopt analyze'.
type Capture struct {
	cmd    *exec.Cmd
	path   string
	stderr timedOutput // tcpdump writes it while StartCapture reads it
}

// captureSnapBytes keeps IP and TCP headers with options; payload is not
// needed to diagnose a flow and would make captures huge.
const captureSnapBytes = 128

// StartCapture starts tcpdump on dev in h, writing to path.
func StartCapture(ctx context.Context, l *lab.Lab, h *lab.Host, dev, path string) (*Capture, error) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return nil, errors.New("a capture needs tcpdump, which is not installed: apt-get install tcpdump")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create capture folder: %w", err)
	}
	c := &Capture{path: path}
	c.cmd = l.Command(ctx, h, "tcpdump", "-i", dev, "-s", fmt.Sprint(captureSnapBytes), "-U", "-n", "-w", path, "tcp")
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tcpdump in %s: %w", h.NS, err)
	}
	// tcpdump says "listening on" once it captures.
	for i := 0; i < 100 && !strings.Contains(c.stderrText(), "listening on"); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return c, nil
}

// Stop ends the capture and waits until the file is complete.
func (c *Capture) Stop() error {
	// tcpdump runs under 'ip netns exec' in its own process group.
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if st, err := os.Stat(c.path); err != nil || st.Size() == 0 {
		return fmt.Errorf("capture %s is empty: %s", c.path, strings.TrimSpace(c.stderrText()))
	}
	return nil
}

func (c *Capture) stderrText() string {
	s, _ := c.stderr.result()
	return s
}

// Dropped is the packets tcpdump reported it lost, once stopped.
func (c *Capture) Dropped() int { return droppedByKernel(c.stderrText()) }

var droppedRE = regexp.MustCompile(`(\d+) packets? dropped by kernel`)

// droppedByKernel reads the packets tcpdump lost from its closing report.
func droppedByKernel(stderr string) int {
	m := droppedRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// CountZeroWindows counts the TCP segments sent to dst in a pcap, and those
// with a zero window (RSTs aside): zero whatever the scale, no SYN needed.
func CountZeroWindows(path string, dst netip.Addr) (zero, toDst int, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("open capture: %w", err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		return 0, 0, fmt.Errorf("capture %s: %w", path, err)
	}
	opts := gopacket.DecodeOptions{Lazy: true, NoCopy: true}
	for {
		data, _, err := r.ZeroCopyReadPacketData()
		if errors.Is(err, io.EOF) {
			return zero, toDst, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("capture %s: %w", path, err)
		}
		p := gopacket.NewPacket(data, r.LinkType(), opts)
		var to netip.Addr
		switch ip := p.NetworkLayer().(type) {
		case *layers.IPv4:
			to, _ = netip.AddrFromSlice(ip.DstIP)
		case *layers.IPv6:
			to, _ = netip.AddrFromSlice(ip.DstIP)
		}
		tcp, ok := p.TransportLayer().(*layers.TCP)
		if !ok || to.Unmap() != dst {
			continue
		}
		toDst++
		if tcp.Window == 0 && !tcp.RST {
			zero++
		}
	}
}
