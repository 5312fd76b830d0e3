package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/wanem"
)

// LinkEnd names one end of the emulated link: a TUN device in a namespace.
type LinkEnd struct {
	NS  string `json:"ns"`
	Dev string `json:"dev"`
}

// LinkSpec is what the lab hands the link helper on its standard input.
type LinkSpec struct {
	A  LinkEnd      `json:"a"`
	B  LinkEnd      `json:"b"`
	AB wanem.Config `json:"ab"` // impairments from A to B
	BA wanem.Config `json:"ba"` // impairments from B to A
}

// LinkStats is what the link helper reports when it stops.
type LinkStats struct {
	AB wanem.Counters `json:"ab"`
	BA wanem.Counters `json:"ba"`
}

const readyLine = "wanem ready"

// RunLink is the body of the link helper process (wanbench link): it reads a
// LinkSpec as JSON from in, attaches to both TUN devices, prints a ready
// line on out, forwards packets until ctx is done, then prints the final
// LinkStats as one JSON line on out.
func RunLink(ctx context.Context, in io.Reader, out io.Writer) error {
	var spec LinkSpec
	if err := json.NewDecoder(in).Decode(&spec); err != nil {
		return fmt.Errorf("read link spec (JSON on standard input): %w", err)
	}
	return RunLinkSpec(ctx, spec, out)
}

// RunLinkSpec is RunLink with the spec given.
func RunLinkSpec(ctx context.Context, spec LinkSpec, out io.Writer) error {
	a, err := OpenTUN(spec.A.NS, spec.A.Dev)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := OpenTUN(spec.B.NS, spec.B.Dev)
	if err != nil {
		return err
	}
	defer b.Close()
	link, err := wanem.NewLink(a, b, spec.AB, spec.BA)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- link.Run(runCtx) }()
	fmt.Fprintln(out, readyLine)
	select {
	case <-ctx.Done():
	case err = <-done:
		if err != nil {
			return fmt.Errorf("link stopped: %w", err)
		}
	}
	cancel()
	// Closing the devices unblocks the readers.
	a.Close()
	b.Close()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("link stopped: %w", err)
	}
	var st LinkStats
	st.AB, st.BA = link.Stats()
	return json.NewEncoder(out).Encode(st)
}

type linkProc struct {
	cmd   *exec.Cmd
	out   *bufio.Reader
	stats chan LinkStats
}

// StartLink starts the link helper between the two wan0 devices with the
// given impairments (A is the client side: client in direct, edgeA in
// edges), replacing a running one. It returns once packets flow.
func (l *Lab) StartLink(ctx context.Context, ab, ba wanem.Config) error {
	l.StopLink()
	if len(l.opts.LinkCommand) == 0 {
		return errors.New("lab: no link command configured (Options.LinkCommand)")
	}
	aHost, bHost := l.Client, l.Server
	if l.Kind == Edges {
		aHost, bHost = l.EdgeA, l.EdgeB
	}
	spec := LinkSpec{A: LinkEnd{aHost.NS, "wan0"}, B: LinkEnd{bHost.NS, "wan0"}, AB: ab, BA: ba}
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	argv := l.opts.LinkCommand
	if l.opts.Realtime && realtimeWorks() {
		argv = append([]string{"chrt", "-f", "10"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(string(js))
	cmd.Stderr = os.Stderr
	// GOMAXPROCS above the core count keeps the releasers' sleeping
	// threads from starving the readers.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=8")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start link helper %q: %w", argv, err)
	}
	p := &linkProc{cmd: cmd, out: bufio.NewReader(stdout), stats: make(chan LinkStats, 1)}
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != readyLine {
			ready <- fmt.Errorf("link helper did not start (said %q): %v", strings.TrimSpace(line), err)
			return
		}
		ready <- nil
		var st LinkStats
		if line, err := p.out.ReadString('\n'); err == nil && json.Unmarshal([]byte(line), &st) == nil {
			p.stats <- st
		}
		close(p.stats)
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(60 * time.Second):
		err = errors.New("link helper did not report ready within 60 s (is the machine overloaded?)")
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	l.mu.Lock()
	l.link = p
	l.mu.Unlock()
	return nil
}

// StopLink stops the running link helper, if any, and returns its final
// counters (zero if it could not report them).
func (l *Lab) StopLink() LinkStats {
	l.mu.Lock()
	p := l.link
	l.link = nil
	l.mu.Unlock()
	if p == nil {
		return LinkStats{}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var st LinkStats
	select {
	case st = <-p.stats:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
	}
	_ = p.cmd.Wait()
	return st
}

var realtimeOK *bool

// realtimeWorks reports whether 'chrt -f' is allowed here (it is not in
// some containers).
func realtimeWorks() bool {
	if realtimeOK == nil {
		ok := exec.Command("chrt", "-f", "10", "true").Run() == nil
		realtimeOK = &ok
	}
	return *realtimeOK
}

// RunLinkHelperIf makes a test binary double as the link helper: when the
// environment variable env is "1" (the test set it before starting the
// lab with its own executable as LinkCommand), it runs the link on standard
// input and output until SIGINT or SIGTERM and exits; otherwise it returns
// and the tests run. Call it first in TestMain.
func RunLinkHelperIf(env string) {
	if os.Getenv(env) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := RunLink(ctx, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		os.Stderr.WriteString("link helper: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}
