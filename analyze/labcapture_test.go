//go:build linux

package analyze

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// labScenario is one real-TCP capture made by TestMakeLabCaptures.
type labScenario struct {
	name string   // file name in testdata, without .pcap
	link []string // wanbench link flags
	srv  []string // labtcp serve flags
	snd  []string // labtcp send flags
	dev  []string // extra "ip link set wan0" settings in the sender's namespace
	rt   []string // metrics of the sender's route to the receiver
	at   string   // where to capture: "" the sender; "both": also the receiver, into NAME-rx.pcap; "rx": the receiver only
}

// files are the captures a scenario writes into dir, by namespace role.
func (sc labScenario) files(dir string) (snd, rcv string) {
	p := filepath.Join(dir, sc.name+".pcap")
	switch sc.at {
	case "both":
		return p, filepath.Join(dir, sc.name+"-rx.pcap")
	case "rx":
		return "", p
	}
	return p, ""
}

// labScenarios are the captures TestMakeLabCaptures records. (The older
// lab-* captures come from make-captures.sh.)
var labScenarios = []labScenario{
	// A field case: a sender whose SO_SNDBUF caps the bytes
	// in flight far below the receiver's window, on a fast 40 ms path.
	// Linux lets a socket queue one GSO packet past its send buffer: a
	// 16 KiB GSO limit keeps the flight near the buffer. Also captured at
	// the receiver, where the flight cannot be seen.
	{name: "lab-send-buffer-limited", link: []string{"--delay", "20ms", "--rate", "100mbit"},
		srv: []string{"-rcvbuf", "300000"}, snd: []string{"-bytes", "2000000", "-sndbuf", "24576"},
		dev: []string{"gso_max_size", "16384"}, at: "both"},
	// An application that writes 16 KiB every 25 ms (5.2 Mbit/s) on the
	// same path: pauses shorter than the RTT, so the flight never drains.
	{name: "lab-app-limited", link: []string{"--delay", "20ms", "--rate", "100mbit"},
		snd: []string{"-bytes", "1638400", "-chunk", "16384", "-gap", "25ms"}},
	// 100 kB on the same path: over in a few round trips, still in slow start.
	{name: "lab-opportunity-limited", link: []string{"--delay", "20ms", "--rate", "100mbit"},
		snd: []string{"-bytes", "100000"}},
	// A 10 Mbit/s bottleneck with a 100 ms queue, seen from the receiver:
	// the queueing shows only in the sender's echoes of the receiver's
	// timestamps. The sender's congestion window is clamped at 45 segments
	// (65 kB: the 50 kB BDP plus a standing queue of about 12 ms), so that
	// slow start cannot overflow the queue: a loss would make it
	// loss-limited.
	{name: "lab-path-limited-rx", link: []string{"--delay", "20ms", "--rate", "10mbit", "--queue", "100ms"},
		snd: []string{"-bytes", "1500000"}, rt: []string{"cwnd", "lock", "45"}, at: "rx"},
}

// Addresses from the benchmarking range that the lab (bench/lab) does not
// use, so that a capture run can never be mistaken for lab traffic.
const (
	labSndAddr = "198.19.77.1"
	labRcvAddr = "198.19.77.2"
)

// TestMakeLabCaptures records the labScenarios captures: real Linux TCP
// between two network namespaces joined by the project's link emulator
// (wanbench link: this kernel has no netem), captured with tcpdump on the
// TUN device of the sender (or the receiver: labScenario.at), headers only.
// It is off by default and needs root:
//
//	WANOPT_LAB_CAPTURES=all go test -run TestMakeLabCaptures -v ./analyze
//	WANOPT_LAB_CAPTURES=lab-app-limited,lab-send-buffer-limited go test …
//
// WANOPT_LAB_OUT writes the files to another directory (default testdata;
// then refresh the fuzz seeds with TestGenerate -update).
// Each scenario gets fresh namespaces (wanoptan-PID-s, wanoptan-PID-r), so
// no TCP metrics carry over, and is stopped after 25 s. Everything it
// creates is removed when it ends, and only processes it started are
// signalled.
func TestMakeLabCaptures(t *testing.T) {
	sel := os.Getenv("WANOPT_LAB_CAPTURES")
	if sel == "" {
		t.Skip("set WANOPT_LAB_CAPTURES=all (as root) to record the lab captures")
	}
	if os.Geteuid() != 0 {
		t.Fatal("WANOPT_LAB_CAPTURES needs root: it creates network namespaces")
	}
	// Lab measurements on this machine are CPU-sensitive: never run beside one.
	if out, err := exec.Command("pgrep", "-af", "wanbench|wanopt run").Output(); err == nil {
		t.Fatalf("a lab seems to be running, try later:\n%s", out)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "wob") {
		t.Fatalf("lab namespaces exist (a lab run or test is under way), try later:\n%s", out)
	}
	for _, tool := range []string{"ip", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (apt-get install iproute2 tcpdump)", tool)
		}
	}
	out := os.Getenv("WANOPT_LAB_OUT")
	if out == "" {
		out = "testdata"
	}
	bin := t.TempDir()
	for _, b := range [][2]string{{"wanbench", "../cmd/wanbench"}, {"labtcp", "./testdata/labtcp"}} {
		if o, err := exec.Command("go", "build", "-o", filepath.Join(bin, b[0]), b[1]).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b[0], err, o)
		}
	}
	for _, sc := range labScenarios {
		if sel != "all" && sel != "1" && !strings.Contains(","+sel+",", ","+sc.name+",") {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			if err := recordLab(ctx, t, bin, sc, out); err != nil {
				t.Fatal(err)
			}
			sf, rf := sc.files(out)
			for _, fn := range []string{sf, rf} {
				if fn == "" {
					continue
				}
				rep, err := AnalyzeFile(fn, Options{})
				if err != nil {
					t.Fatal(err)
				}
				var b strings.Builder
				WriteText(&b, rep)
				t.Logf("%s\n%s", fn, b.String())
			}
		})
	}
}

// labProcs are the processes one scenario started, stopped by PID.
type labProcs struct {
	mu    sync.Mutex
	procs []*exec.Cmd
}

func (p *labProcs) start(c *exec.Cmd) error {
	if err := c.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.procs = append(p.procs, c)
	p.mu.Unlock()
	return nil
}

// stop interrupts every process still running (SIGINT lets tcpdump flush
// and the link print its counters), then kills what is left.
func (p *labProcs) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.procs {
		c.Process.Signal(syscall.SIGINT)
	}
	for _, c := range p.procs {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	p.procs = nil
}

// waitLine waits until r yields a line containing want.
func waitLine(ctx context.Context, r io.Reader, want string) error {
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), want) {
				ok = true
				found <- true
			}
		}
		if !ok {
			found <- false
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			return fmt.Errorf("output ended without %q", want)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %q: %w", want, ctx.Err())
	}
}

func recordLab(ctx context.Context, t *testing.T, bin string, sc labScenario, dir string) error {
	snd := fmt.Sprintf("wanoptan-%d-s", os.Getpid())
	rcv := fmt.Sprintf("wanoptan-%d-r", os.Getpid())
	ip := func(args ...string) error {
		if o, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, o)
		}
		return nil
	}
	var procs labProcs
	defer func() {
		procs.stop()
		for _, ns := range []string{snd, rcv} {
			ip("netns", "del", ns)
		}
	}()
	for ns, addr := range map[string]string{snd: labSndAddr, rcv: labRcvAddr} {
		for _, args := range [][]string{
			{"netns", "add", ns},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", ns, "tuntap", "add", "dev", "wan0", "mode", "tun"},
			{"-n", ns, "link", "set", "wan0", "mtu", "1500", "txqueuelen", "10000", "up"},
			{"-n", ns, "addr", "add", addr + "/30", "dev", "wan0"},
		} {
			if err := ip(args...); err != nil {
				return err
			}
		}
	}
	if len(sc.dev) > 0 {
		if err := ip(append([]string{"-n", snd, "link", "set", "wan0"}, sc.dev...)...); err != nil {
			return err
		}
	}
	if len(sc.rt) > 0 {
		if err := ip(append([]string{"-n", snd, "route", "add", labRcvAddr + "/32", "dev", "wan0"}, sc.rt...)...); err != nil {
			return err
		}
	}
	inNS := func(ns string, argv ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	}

	link := exec.CommandContext(ctx, filepath.Join(bin, "wanbench"), append([]string{"link", "--a", snd + ":wan0", "--b", rcv + ":wan0"}, sc.link...)...)
	lo, _ := link.StdoutPipe()
	link.Stderr = os.Stderr
	if err := procs.start(link); err != nil {
		return err
	}
	if err := waitLine(ctx, lo, "wanem ready"); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	sf, rf := sc.files(dir)
	for ns, file := range map[string]string{snd: sf, rcv: rf} {
		if file == "" {
			continue
		}
		dump := inNS(ns, "tcpdump", "-Z", "root", "-i", "wan0", "-s", "128", "--immediate-mode", "-U", "-w", file, "tcp", "port", "5001")
		de, _ := dump.StderrPipe()
		if err := procs.start(dump); err != nil {
			return err
		}
		if err := waitLine(ctx, de, "listening on"); err != nil {
			return fmt.Errorf("tcpdump: %w", err)
		}
	}
	srv := inNS(rcv, append([]string{filepath.Join(bin, "labtcp"), "serve", "-addr", labRcvAddr + ":5001"}, sc.srv...)...)
	so, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := procs.start(srv); err != nil {
		return err
	}
	if err := waitLine(ctx, so, "listening"); err != nil {
		return fmt.Errorf("labtcp serve: %w", err)
	}
	t.Logf("%s: link %v, server %v, sender %v %v %v", sc.name, sc.link, sc.srv, sc.snd, sc.dev, sc.rt)
	send := inNS(snd, append([]string{filepath.Join(bin, "labtcp"), "send", "-addr", labRcvAddr + ":5001"}, sc.snd...)...)
	send.Stdout, send.Stderr = os.Stderr, os.Stderr
	if err := send.Run(); err != nil {
		return fmt.Errorf("labtcp send: %w", err)
	}
	if err := srv.Wait(); err != nil {
		return fmt.Errorf("labtcp serve: %w", err)
	}
	time.Sleep(time.Second) // the last ACKs and FINs
	return nil
}
