package exp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
)

// iperfServer is an iperf 2 server running in a lab host. iperf 2.1.8's
// server sometimes aborts after a peer reset; ensure restarts it.
type iperfServer struct {
	lab  *lab.Lab
	host *lab.Host

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *strings.Builder
}

func startIperfServer(ctx context.Context, l *lab.Lab, h *lab.Host) (*iperfServer, error) {
	if _, err := exec.LookPath("iperf"); err != nil {
		return nil, errors.New("iperf (version 2) not found: apt-get install iperf")
	}
	s := &iperfServer{lab: l, host: h}
	return s, s.ensure(ctx)
}

// ensure (re)starts the server if it is not running.
func (s *iperfServer) ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		select {
		case <-s.exited:
			s.cmd = nil // died: start a new one
		default:
			return nil
		}
	}
	cmd := s.lab.Command(ctx, s.host, "iperf", "-s", "-p", "5001")
	s.stderr = &strings.Builder{}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start iperf server in %s: %w", s.host.NS, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	// Wait until it listens.
	for i := 0; i < 50; i++ {
		out, _ := s.lab.Command(ctx, s.host, "ss", "-Htln", "sport = :5001").Output()
		if strings.Contains(string(out), "5001") {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("iperf server in %s exited at start: %s", s.host.NS, s.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("iperf server in %s not listening after 2.5 s", s.host.NS)
}

// kill ends the server (ensure starts a new one) and waits for it.
func (s *iperfServer) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// died reports whether the server exited (it should run until stopped).
func (s *iperfServer) died() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return true
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// IperfResult is one iperf 2 client run.
type IperfResult struct {
	Bytes   int64   `json:"bytes"`   // payload bytes moved, all streams
	Seconds float64 `json:"seconds"` // iperf's [SUM] interval
	Mbps    float64 `json:"mbps"`    // Bytes*8/Seconds/1e6
	// Retried counts the attempts that failed before this one (the iperf
	// server restarted each time), and RetryReason is the last failure;
	// see runIperf.
	Retried     int    `json:"retried,omitempty"`
	RetryReason string `json:"retry_reason,omitempty"`
}

// runTimeout bounds one iperf run of bytes at a link of rateBps: a minute
// plus the transfer at a twelfth of the link (plain TCP with 512 KB
// windows at 250 ms gets a sixth), so that a wedged run is retried within
// minutes, not after the time a 5 Mbit/s transfer would take.
func runTimeout(bytes int64, rateBps float64) time.Duration {
	floorBps := max(2e6, rateBps/12)
	return time.Minute + time.Duration(float64(bytes)*8/floorBps*float64(time.Second))
}

var sumRE = regexp.MustCompile(`\[(?:SUM|\s*\*?\d+)\]\s+([0-9.]+)-([0-9.]+)\s+sec\s+([0-9.]+)\s+([KMG]?)Bytes`)

// parseIperf reads iperf 2's text output (-f m) and returns the transfer
// as a whole: the [SUM] line when there are several streams, else the
// only stream's line.
func parseIperf(out string, streams int, bytesPerStream int64) (IperfResult, error) {
	var best []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		m := sumRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if streams == 1 || strings.Contains(line, "[SUM]") {
			best = m
		}
	}
	if best == nil {
		return IperfResult{}, fmt.Errorf("no result line in iperf output: %q", tail(out, 400))
	}
	from, _ := strconv.ParseFloat(best[1], 64)
	to, _ := strconv.ParseFloat(best[2], 64)
	secs := to - from
	if secs <= 0 {
		return IperfResult{}, fmt.Errorf("iperf reported an empty interval: %q", best[0])
	}
	r := IperfResult{Bytes: int64(streams) * bytesPerStream, Seconds: secs}
	r.Mbps = float64(r.Bytes) * 8 / secs / 1e6
	return r, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// runIperf runs 'iperf -c server -n N -P streams -R' from client, retrying
// once with a restarted server if the server died (iperf 2.1.8 bug).
func runIperf(ctx context.Context, l *lab.Lab, client *lab.Host, srv *iperfServer, bytesPerStream int64, streams int, timeout time.Duration) (IperfResult, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if err := srv.ensure(ctx); err != nil {
			return IperfResult{}, err
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		cmd := l.Command(rctx, client, "iperf", "-c", l.Server.Addr.String(), "-p", "5001",
			"-n", strconv.FormatInt(bytesPerStream, 10), "-P", strconv.Itoa(streams), "-R", "-f", "m")
		out, err := cmd.CombinedOutput()
		cancel()
		if ctx.Err() != nil {
			return IperfResult{}, ctx.Err()
		}
		if srv.died() {
			lastErr = fmt.Errorf("iperf server died during the run (restarting it): %s", tail(srv.stderr.String(), 200))
			continue
		}
		if err != nil {
			// iperf 2.1.8's server can wedge: its stream threads wait on
			// each other forever after reading the client's header (seen
			// once in 130 runs, on plain and wanopt paths alike). Start a
			// fresh server for the next attempt.
			lastErr = fmt.Errorf("iperf client: %w: %s", err, tail(string(out), 400))
			srv.kill()
			continue
		}
		r, err := parseIperf(string(out), streams, bytesPerStream)
		r.Retried = attempt
		if lastErr != nil {
			r.RetryReason = lastErr.Error()
		}
		return r, err
	}
	return IperfResult{}, lastErr
}
