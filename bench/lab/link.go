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
	"strconv"
	"strings"
	"sync"
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
	// Offload opens both ends with UDP segmentation offload (see
	// vnet.go): a UDP GSO batch wakes the helper once and the helper
	// splits it. Before Linux 6.2 the helper says so and reads one
	// datagram at a time.
	Offload bool `json:"offload,omitempty"`
}

// LinkStats is what the link helper reports when it stops.
type LinkStats struct {
	AB wanem.Counters `json:"ab"`
	BA wanem.Counters `json:"ba"`
}

const readyLine = "wanem ready"

// The link helper's commands, one per line after the spec (see RunLinkSpec).
const (
	cmdDown = "down"
	cmdUp   = "up"
	cmdMTU  = "mtu" // "mtu N": the largest IP packet both ways, 0 for none
)

// linkControl is what the commands act on: a *wanem.Link.
type linkControl interface {
	SetDown(bool)
	SetMTU(int) error
}

// RunLink is the body of the link helper process (wanbench link): it reads a
// LinkSpec as JSON from in, attaches to both TUN devices, prints a ready
// line on out, forwards packets until ctx is done, then prints the final
// LinkStats as one JSON line. Commands follow the spec on in (RunLinkSpec).
func RunLink(ctx context.Context, in io.Reader, out io.Writer) error {
	spec, control, err := readLinkSpec(in)
	if err != nil {
		return err
	}
	return RunLinkSpec(ctx, spec, control, out)
}

// readLinkSpec decodes the JSON spec at the start of in and returns it with
// the rest of in, where the commands are.
func readLinkSpec(in io.Reader) (LinkSpec, io.Reader, error) {
	var spec LinkSpec
	dec := json.NewDecoder(in)
	if err := dec.Decode(&spec); err != nil {
		return spec, nil, fmt.Errorf("read link spec (JSON on standard input): %w", err)
	}
	// The decoder may have read past the spec into the commands.
	return spec, io.MultiReader(dec.Buffered(), in), nil
}

// RunLinkSpec is RunLink with the spec given. If control is not nil, it
// reads commands from it, one per line, while the link runs: "down", "up"
// (wanem.Link.SetDown) and "mtu N" (wanem.Link.SetMTU). Other lines, and an
// MTU the link refuses, are reported on standard error and ignored. The end
// of control stops only the reading of commands; a blocked reader outlives
// RunLinkSpec (the helper process exits right after).
func RunLinkSpec(ctx context.Context, spec LinkSpec, control io.Reader, out io.Writer) error {
	open := func(end LinkEnd) (linkDevice, error) {
		if spec.Offload {
			return openLinkTUN(end.NS, end.Dev, os.Stderr)
		}
		return OpenTUN(end.NS, end.Dev)
	}
	a, err := open(spec.A)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := open(spec.B)
	if err != nil {
		return err
	}
	defer b.Close()
	link, err := wanem.NewLink(a, b, spec.AB, spec.BA)
	if err != nil {
		return err
	}
	if control != nil {
		go readLinkCommands(control, link, os.Stderr)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- link.Run(runCtx) }()
	go func() { // see monitor_linux.go; silent unless that fails
		search, stop := context.WithTimeout(runCtx, monitorSearch)
		defer stop()
		_, err := batchMonitor(search)
		if err != nil && runCtx.Err() == nil && !errors.Is(err, errNotRealtime) {
			fmt.Fprintf(os.Stderr, "link: %v; it stays real-time\n", err)
		}
	}()
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
	for _, d := range []linkDevice{a, b} {
		if t, ok := d.(*offloadTUN); ok && t.Dropped() > 0 {
			fmt.Fprintf(os.Stderr, "link: dropped %d frames of unsupported offload types\n", t.Dropped())
		}
	}
	var st LinkStats
	st.AB, st.BA = link.Stats()
	return json.NewEncoder(out).Encode(st)
}

// readLinkCommands applies the commands read from r to link until r ends,
// and returns how many it ignored (reported on log).
func readLinkCommands(r io.Reader, link linkControl, log io.Writer) (ignored int) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if arg, ok := strings.CutPrefix(line, cmdMTU+" "); ok {
			mtu, err := strconv.Atoi(strings.TrimSpace(arg))
			if err == nil {
				err = link.SetMTU(mtu)
			}
			if err != nil {
				ignored++
				fmt.Fprintf(log, "link helper: command %q ignored: %v\n", line, err)
			}
			continue
		}
		switch line {
		case cmdDown:
			link.SetDown(true)
		case cmdUp:
			link.SetDown(false)
		case "":
		default:
			ignored++
			fmt.Fprintf(log, "link helper: unknown command %q on standard input ignored; want %q, %q or %q\n", line, cmdDown, cmdUp, cmdMTU+" BYTES")
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(log, "link helper: reading commands stopped: %v\n", err)
	}
	return ignored
}

type linkProc struct {
	cmd   *exec.Cmd
	out   *bufio.Reader
	stats chan LinkStats

	mu    sync.Mutex // serializes commands on stdin
	stdin io.WriteCloser
}

// StartLink starts the link helper between the two wan0 devices (A is the
// client side), replacing a running one. It returns once packets flow.
func (l *Lab) StartLink(ctx context.Context, ab, ba wanem.Config) error {
	l.StopLink()
	if len(l.opts.LinkCommand) == 0 {
		return errors.New("lab: no link command configured (Options.LinkCommand)")
	}
	aHost, bHost := l.Client, l.Server
	if l.Kind == Edges {
		aHost, bHost = l.EdgeA, l.EdgeB
	}
	spec := LinkSpec{A: LinkEnd{aHost.NS, "wan0"}, B: LinkEnd{bHost.NS, "wan0"}, AB: ab, BA: ba, Offload: l.opts.LinkOffload}
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	argv := l.opts.LinkCommand
	if l.opts.Realtime && realtimeWorks() {
		argv = append([]string{"chrt", "-f", "10"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// Standard input stays open for the commands; Wait closes it.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
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
	p := &linkProc{cmd: cmd, out: bufio.NewReader(stdout), stats: make(chan LinkStats, 1), stdin: stdin}
	if _, err := stdin.Write(append(js, '\n')); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("hand the link spec to the link helper %q: %w", argv, err)
	}
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

// SetLinkDown takes the running link down (see wanem.Link.SetDown) or,
// with false, up again, within a millisecond, from any goroutine.
func (l *Lab) SetLinkDown(down bool) error {
	l.mu.Lock()
	p := l.link
	l.mu.Unlock()
	if p == nil {
		return errors.New("lab: no link is running to take down or up; call StartLink first")
	}
	cmd := cmdUp
	if down {
		cmd = cmdDown
	}
	return l.linkCommand(cmd)
}

// SetLinkMTU sets the largest IP packet the running link carries both ways
// (wanem.Link.SetMTU; 0: no limit), refusing one the link cannot take.
func (l *Lab) SetLinkMTU(mtu int) error {
	if err := (wanem.Config{MTU: mtu}).Validate(); err != nil {
		return err
	}
	return l.linkCommand(fmt.Sprintf("%s %d", cmdMTU, mtu))
}

// linkCommand writes one command line to the running link helper.
func (l *Lab) linkCommand(cmd string) error {
	l.mu.Lock()
	p := l.link
	l.mu.Unlock()
	if p == nil {
		return fmt.Errorf("lab: no link is running for %q; call StartLink first", cmd)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("tell the link helper %q: %w (has it exited? see its standard error)", cmd, err)
	}
	return nil
}

// StopLink stops the running link helper, if any, and returns its final
// counters (zero if it reported none).
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

// realtimeWorks reports whether 'chrt -f' is allowed here.
func realtimeWorks() bool {
	if realtimeOK == nil {
		ok := exec.Command("chrt", "-f", "10", "true").Run() == nil
		realtimeOK = &ok
	}
	return *realtimeOK
}

// RunLinkHelperIf makes a test binary double as the link helper: with env
// set to "1" it runs the link on standard input and output until SIGINT or
// SIGTERM and exits; otherwise it returns. Call it first in TestMain.
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
