package exp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
)

// capture is a tcpdump writing the headers of every packet on one lab
// host's device to a pcap file, for 'wanopt analyze'.
type capture struct {
	cmd    *exec.Cmd
	path   string
	stderr timedOutput // tcpdump writes it while startCapture reads it
}

// captureSnapBytes keeps IP and TCP headers with options; payload is not
// needed to diagnose a flow and would make captures huge.
const captureSnapBytes = 128

// startCapture starts tcpdump on dev in h, writing to path.
func startCapture(ctx context.Context, l *lab.Lab, h *lab.Host, dev, path string) (*capture, error) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return nil, errors.New("--capture needs tcpdump: apt-get install tcpdump")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create capture folder: %w", err)
	}
	c := &capture{path: path}
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

// stop ends the capture and waits until the file is complete.
func (c *capture) stop() error {
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

func (c *capture) stderrText() string {
	s, _ := c.stderr.result()
	return s
}
