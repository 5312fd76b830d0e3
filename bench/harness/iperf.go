package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
)

// IperfServer is an iperf 2 server running in a lab host. iperf 2.1.8's
// server sometimes aborts after a peer reset; ensure restarts it.
type IperfServer struct {
	lab  *lab.Lab
	host *lab.Host

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *strings.Builder
	// stdout is every report the server printed, across restarts.
	stdout lockedText
}

// lockedText is a process's output, read while it is still written.
type lockedText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (t *lockedText) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.Write(p)
}

// Len is the output's length so far, a mark for since.
func (t *lockedText) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.Len()
}

// since is the output from mark on.
func (t *lockedText) since(mark int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()[mark:]
}

func StartIperfServer(ctx context.Context, l *lab.Lab, h *lab.Host) (*IperfServer, error) {
	if _, err := exec.LookPath("iperf"); err != nil {
		return nil, errors.New("iperf (version 2) not found: apt-get install iperf")
	}
	s := &IperfServer{lab: l, host: h}
	return s, s.ensure(ctx)
}

// ensure (re)starts the server if it is not running.
func (s *IperfServer) ensure(ctx context.Context) error {
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
	cmd := s.lab.Command(ctx, s.host, "iperf", "-s", "-p", "5001", "-f", "m")
	s.stderr = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = &s.stdout, s.stderr
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
func (s *IperfServer) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// ErrUploadOutage refuses an upload with an outage.
var ErrUploadOutage = errors.New("an upload with an outage: the recovery is timed from the iperf client's interval reports, which for an upload count bytes its socket took, not bytes delivered; measure outages with downloads")

// serverReportWait bounds the wait for the server's report once the
// client has exited (a round trip and the edges' buffers later).
const serverReportWait = 10 * time.Second

// report waits up to wait for the server's report of the transfer after
// mark in its output, and returns that output.
func (s *IperfServer) report(ctx context.Context, mark, streams int, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		out := s.stdout.since(mark)
		if lastIperfResult(out, streams) != nil {
			return out, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the iperf server printed no report %v after the client ended (restarting it); it printed: %q", wait, tail(out, 600))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// died reports whether the server exited (it should run until stopped).
func (s *IperfServer) died() bool {
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
	// Retried counts the attempts that failed before this one, and
	// RetryReason is the last failure (see RunIperf).
	Retried     int    `json:"retried,omitempty"`
	RetryReason string `json:"retry_reason,omitempty"`
	// Failed is set when a run with an outage did not complete: a result,
	// not retried. Error says what happened; Bytes, Seconds and Mbps are
	// zero and the run counts in no mean.
	Failed bool   `json:"failed,omitempty"`
	Error  string `json:"error,omitempty"`
	// With an outage: when the link went down and came back, in seconds
	// since the client started; both 0 if the transfer ended first.
	OutageStartS float64 `json:"outage_start_s,omitempty"`
	OutageEndS   float64 `json:"outage_end_s,omitempty"`
	// RecoveryS is the seconds from the link's return until the end of
	// the first interval at RecoveryBar of GoodputLimitMbps or more;
	// NotRecovered (-1) if none was, 0 when no outage hit the transfer.
	RecoveryS float64 `json:"recovery_s,omitempty"`
	// IntervalS and Intervals are iperf's interval reports (-i), streams
	// added up, in seconds since the client started; outage runs only.
	IntervalS float64        `json:"interval_s,omitempty"`
	Intervals []RateInterval `json:"intervals,omitempty"`
}

// IperfRun describes one measured transfer for RunIperf.
type IperfRun struct {
	BytesPerStream int64
	Streams        int
	Timeout        time.Duration
	// OutageAt and OutageFor, if OutageFor > 0: the link goes down
	// OutageAt after the client starts, for OutageFor, and throughput is
	// reported every Interval (at least 0.1 s) to time the recovery.
	OutageAt, OutageFor time.Duration
	Interval            time.Duration
	LinkBps             float64
	// Upload sends from the client to the server (iperf without -R); the
	// run is the server's report, since the client's counts bytes the near
	// edge buffered, not bytes delivered. No outage with an upload.
	Upload bool
}

// RunTimeout bounds one iperf run: a minute plus the bytes at a twelfth of
// the link (plain TCP with 512 KB windows at 250 ms gets a sixth).
func RunTimeout(bytes int64, rateBps float64) time.Duration {
	return LossyRunTimeout(bytes, rateBps, 1, 0, 0)
}

// LossyRunTimeout is RunTimeout on a link that loses lossPct of packets:
// plain TCP then gets at most about MSS/RTT·√(3/2)/√p per stream (Mathis
// et al.); the floor is lowered to half of that for all streams.
func LossyRunTimeout(bytes int64, rateBps float64, streams int, rtt time.Duration, lossPct float64) time.Duration {
	floorBps := max(2e6, rateBps/12)
	if lossPct > 0 {
		p := min(lossPct, 100) / 100
		mathis := 1448 * 8 / max(rtt, time.Millisecond).Seconds() * math.Sqrt(1.5/p)
		floorBps = min(floorBps, 0.5*float64(max(streams, 1))*mathis)
	}
	return time.Minute + time.Duration(float64(bytes)*8/floorBps*float64(time.Second))
}

var sumRE = regexp.MustCompile(`\[(?:SUM|\s*\*?\d+)\]\s+([0-9.]+)-([0-9.]+)\s+sec\s+([0-9.]+)\s+([KMG]?)Bytes`)

// parseIperf returns the transfer from iperf 2's output (-f m): the last
// [SUM] line, or the stream's; a transfer short of its bytes is an error.
func parseIperf(out string, streams int, bytesPerStream int64) (IperfResult, error) {
	best := lastIperfResult(out, streams)
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
	// iperf prints three significant digits: allow 1 % for rounding.
	if moved := iperfBytes(best[3], best[4]); moved < 0.99*float64(r.Bytes) {
		// The whole report: which streams came short tells an iperf
		// quirk from a stalled path.
		return IperfResult{}, fmt.Errorf("iperf moved %.0f of %d bytes: %q; its report: %q", moved, r.Bytes, best[0], tail(out, 1500))
	}
	r.Mbps = float64(r.Bytes) * 8 / secs / 1e6
	return r, nil
}

// lastIperfResult is the submatches of the last line of out that reports
// a whole transfer of streams: [SUM] with several, else a stream's line.
func lastIperfResult(out string, streams int) []string {
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
	return best
}

// iperfBytes converts iperf 2's transfer column to bytes.
func iperfBytes(num, unit string) float64 {
	v, _ := strconv.ParseFloat(num, 64)
	switch unit {
	case "K":
		v *= 1 << 10
	case "M":
		v *= 1 << 20
	case "G":
		v *= 1 << 30
	}
	return v
}

// streamLineRE matches one stream's report: its id, the interval in
// seconds of iperf's clock, and the bytes moved.
var streamLineRE = regexp.MustCompile(`^\[\s*\*?(\d+)\]\s+([0-9.]+)-([0-9.]+)\s+sec\s+([0-9.]+)\s+([KMG]?)Bytes`)

// timedLine is one line of a command's output and when it arrived.
type timedLine struct {
	at   time.Duration
	text string
}

// iperfIntervals adds up the streams' interval reports of a run with '-i
// interval' into one throughput per interval, since the client started. It
// reads the streams' own lines (iperf 2.1.8's -R [SUM] intervals have
// garbage times). A report for an interval ending at t is printed right
// after t, so the smallest (arrival − t) places iperf's clock on the run's.
func iperfIntervals(lines []timedLine, interval time.Duration) []RateInterval {
	step := interval.Seconds()
	type agg struct {
		from, to float64
		bytes    float64
	}
	groups := map[int]*agg{}
	seen := map[[2]int]bool{}
	offset := math.Inf(1)
	for _, l := range lines {
		m := streamLineRE.FindStringSubmatch(strings.TrimSpace(l.text))
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		from, _ := strconv.ParseFloat(m[2], 64)
		to, _ := strconv.ParseFloat(m[3], 64)
		if to <= from || to-from > step*1.01+1e-4 {
			continue // a stream's closing report
		}
		slot := int(math.Round(from / step))
		if seen[[2]int{id, slot}] {
			continue
		}
		seen[[2]int{id, slot}] = true
		g := groups[slot]
		if g == nil {
			g = &agg{from: from, to: to}
			groups[slot] = g
		}
		g.from, g.to = min(g.from, from), max(g.to, to)
		g.bytes += iperfBytes(m[4], m[5])
		offset = min(offset, l.at.Seconds()-to)
	}
	if len(groups) == 0 {
		return nil
	}
	offset = max(offset, 0)
	slots := make([]int, 0, len(groups))
	for k := range groups {
		slots = append(slots, k)
	}
	slices.Sort(slots)
	out := make([]RateInterval, 0, len(slots))
	for _, k := range slots {
		g := groups[k]
		out = append(out, RateInterval{StartS: round(g.from+offset, 4), EndS: round(g.to+offset, 4), Mbps: round(g.bytes*8/(g.to-g.from)/1e6, 3)})
	}
	return out
}

// timedOutput collects a command's output (standard output and error
// together) line by line, with the time each line arrived.
type timedOutput struct {
	start time.Time
	mu    sync.Mutex
	part  []byte // the incomplete last line
	lines []timedLine
	all   strings.Builder
}

func (w *timedOutput) Write(p []byte) (int, error) {
	at := time.Since(w.start)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, timedLine{at: at, text: string(w.part[:i])})
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *timedOutput) result() (string, []timedLine) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.lines
	if len(w.part) > 0 {
		lines = append(lines, timedLine{at: time.Since(w.start), text: string(w.part)})
	}
	return w.all.String(), lines
}

// round rounds v to digits decimals, for the JSON's sake.
func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// outageTimes is when an outage began and ended, in seconds since the
// run started; started is false if the run ended before it was due.
type outageTimes struct {
	started      bool
	startS, endS float64
	err          error
}

// runOutage takes the link down at after start and up dur later, unless
// finished closes first; once begun only ctx ends it early, so the next run
// never starts inside it. An error bringing the link back is returned.
func runOutage(ctx context.Context, l *lab.Lab, start time.Time, at, dur time.Duration, finished <-chan struct{}) outageTimes {
	t := time.NewTimer(time.Until(start.Add(at)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-finished:
		return outageTimes{}
	case <-ctx.Done():
		return outageTimes{}
	}
	if err := l.SetLinkDown(true); err != nil {
		return outageTimes{err: fmt.Errorf("take the link down for the outage: %w", err)}
	}
	ot := outageTimes{started: true, startS: round(time.Since(start).Seconds(), 3)}
	t.Reset(dur)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	if err := l.SetLinkDown(false); err != nil {
		ot.err = fmt.Errorf("bring the link back up after the outage: %w", err)
	}
	ot.endS = round(time.Since(start).Seconds(), 3)
	return ot
}

// RunIperf runs 'iperf -c server -n N -P streams -R' from client (without
// -R for an upload). Without an outage, it retries up to twice with a
// restarted server (iperf 2.1.8 bugs); with one, a failed run is a result
// with Failed set. The error is for what stops the experiment.
func RunIperf(ctx context.Context, l *lab.Lab, client *lab.Host, srv *IperfServer, run IperfRun) (IperfResult, error) {
	outage := run.OutageFor > 0
	if outage && run.Upload {
		return IperfResult{}, ErrUploadOutage
	}
	interval := max(run.Interval, 100*time.Millisecond)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if err := srv.ensure(ctx); err != nil {
			return IperfResult{}, err
		}
		rctx, cancel := context.WithTimeout(ctx, run.Timeout)
		args := []string{"iperf", "-c", l.Server.Addr.String(), "-p", "5001",
			"-n", strconv.FormatInt(run.BytesPerStream, 10), "-P", strconv.Itoa(run.Streams), "-f", "m"}
		if !run.Upload {
			args = append(args, "-R")
		}
		mark := srv.stdout.Len()
		if outage {
			args = append(args, "-i", strconv.FormatFloat(interval.Seconds(), 'f', -1, 64))
		}
		cmd := l.Command(rctx, client, args...)
		w := &timedOutput{start: time.Now()}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			cancel()
			return IperfResult{}, fmt.Errorf("start the iperf client in %s: %w", client.NS, err)
		}
		finished := make(chan struct{})
		otc := make(chan outageTimes, 1)
		if outage {
			go func() { otc <- runOutage(ctx, l, w.start, run.OutageAt, run.OutageFor, finished) }()
		}
		err := cmd.Wait()
		close(finished)
		var ot outageTimes
		if outage {
			ot = <-otc
		}
		if err != nil && rctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("%w (killed after the run's timeout of %v)", err, run.Timeout)
		}
		cancel()
		out, lines := w.result()
		if ctx.Err() != nil {
			return IperfResult{}, ctx.Err()
		}
		if ot.err != nil {
			return IperfResult{}, ot.err
		}
		if outage {
			return outageResult(srv, run, interval, out, lines, err, ot), nil
		}
		if srv.died() {
			lastErr = fmt.Errorf("iperf server died during the run (restarting it): %s", tail(srv.stderr.String(), 200))
			continue
		}
		if err != nil {
			// iperf 2.1.8's server can wedge, its stream threads waiting
			// on each other: start a fresh one.
			lastErr = fmt.Errorf("iperf client: %w: %s", err, tail(out, 400))
			srv.kill()
			continue
		}
		if run.Upload {
			if out, err = srv.report(ctx, mark, run.Streams, serverReportWait); err != nil {
				lastErr = err
				srv.kill()
				continue
			}
		}
		r, err := parseIperf(out, run.Streams, run.BytesPerStream)
		r.Retried = attempt
		if lastErr != nil {
			r.RetryReason = lastErr.Error()
		}
		return r, err
	}
	return IperfResult{}, lastErr
}

// outageResult makes the result of a run with an outage, failed or not,
// and restarts a server that may be wedged after a failure.
func outageResult(srv *IperfServer, run IperfRun, interval time.Duration, out string, lines []timedLine, err error, ot outageTimes) IperfResult {
	var r IperfResult
	switch {
	case srv.died():
		r = IperfResult{Failed: true, Error: fmt.Sprintf("iperf server died during the run: %s; client said: %s", tail(srv.stderr.String(), 200), tail(out, 300))}
	case err != nil:
		r = IperfResult{Failed: true, Error: fmt.Sprintf("iperf client: %v: %s", err, tail(out, 400))}
		srv.kill()
	default:
		var perr error
		if r, perr = parseIperf(out, run.Streams, run.BytesPerStream); perr != nil {
			r = IperfResult{Failed: true, Error: perr.Error()}
			srv.kill()
		}
	}
	r.IntervalS = interval.Seconds()
	r.Intervals = iperfIntervals(lines, interval)
	if ot.started {
		r.OutageStartS, r.OutageEndS = ot.startS, ot.endS
		r.RecoveryS = RecoveryTime(r.Intervals, ot.endS, RecoveryBar*GoodputLimitMbps(run.LinkBps))
	}
	return r
}
