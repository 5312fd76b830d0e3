package wanem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/wanem/wanemtest"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/monotime"
)

var _ Device = (*wanemtest.Device)(nil)

// noDeadlines hides a device's deadline methods.
type noDeadlines struct{ Device }

// startLink runs a link between two fresh fake devices and returns them
// with a stop function that cancels Run and returns its error.
func startLink(t *testing.T, ab, ba Config) (a, b *wanemtest.Device, l *Link, stop func() error) {
	t.Helper()
	a, b = wanemtest.NewDevice(4096), wanemtest.NewDevice(4096)
	l, err := NewLink(a, b, ab, ba)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not return within 2 s of cancel")
			}
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return a, b, l, stop
}

// receive waits for one packet written to d.
func receive(t *testing.T, d *wanemtest.Device) wanemtest.Packet {
	t.Helper()
	select {
	case p := <-d.Written():
		return p
	case <-time.After(2 * time.Second):
		t.Fatal("no packet within 2 s")
		return wanemtest.Packet{}
	}
}

func TestLinkForwardsBothWaysAndStops(t *testing.T) {
	leaktest.Check(t)
	a, b, l, stop := startLink(t, Config{}, Config{Delay: time.Millisecond})
	statsDone := make(chan struct{})
	go func() { // Stats runs concurrently with forwarding (the race detector checks)
		defer close(statsDone)
		for range 100 {
			l.Stats()
			time.Sleep(time.Millisecond)
		}
	}()
	var wantBytes uint64
	for i := range 50 {
		wantBytes += uint64(100 + i)
		a.Inject(packet(100+i, uint64(i)))
		b.Inject(packet(200+i, uint64(1000+i)))
	}
	for i := range 50 {
		if p := receive(t, b); seqOf(p.Data) != uint64(i) || len(p.Data) != 100+i {
			t.Fatalf("B received seq %d (%d B), want %d (%d B)", seqOf(p.Data), len(p.Data), i, 100+i)
		}
		if p := receive(t, a); seqOf(p.Data) != uint64(1000+i) || len(p.Data) != 200+i {
			t.Fatalf("A received seq %d (%d B), want %d (%d B)", seqOf(p.Data), len(p.Data), 1000+i, 200+i)
		}
	}
	<-statsDone
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
	ab, ba := l.Stats()
	if ab.Packets != 50 || ba.Packets != 50 || ab.Bytes != wantBytes {
		t.Fatalf("stats A→B %d packets %d B, B→A %d packets; want 50, %d B, 50", ab.Packets, ab.Bytes, ba.Packets, wantBytes)
	}
}

func TestLinkStopsWithoutDeadlinesWhenCallerCloses(t *testing.T) {
	leaktest.Check(t)
	a, b := wanemtest.NewDevice(16), wanemtest.NewDevice(16)
	l, err := NewLink(noDeadlines{a}, noDeadlines{b}, Config{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopClose := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stopClose()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	a.Inject(packet(64, 7))
	if p := receive(t, b); seqOf(p.Data) != 7 {
		t.Fatalf("received seq %d, want 7", seqOf(p.Data))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2 s of cancel and close")
	}
}

func TestLinkReportsDeviceFailure(t *testing.T) {
	leaktest.Check(t)
	a, b := wanemtest.NewDevice(16), wanemtest.NewDevice(16)
	l, err := NewLink(a, b, Config{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	b.Close() // the device disappears under a running link
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), "device B") {
			t.Fatalf("Run returned %v, want an error naming device B that wraps os.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2 s of a device failing")
	}
	// A second Run on the same link is allowed (and fails the same way).
	if err := l.Run(context.Background()); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("second Run returned %v, want os.ErrClosed", err)
	}
}

// rejecting refuses to write packets whose first byte is 0xff, the way a
// TUN device refuses a malformed packet.
type rejecting struct{ *wanemtest.Device }

func (r rejecting) Write(pkt []byte) (int, error) {
	if pkt[0] == 0xff {
		return 0, syscall.EINVAL
	}
	return r.Device.Write(pkt)
}

func TestLinkCountsRejectedWritesAndGoesOn(t *testing.T) {
	a, b := wanemtest.NewDevice(16), wanemtest.NewDevice(16)
	l, err := NewLink(a, rejecting{b}, Config{ReorderPct: 50, ReorderDelay: 200 * time.Microsecond, Seed: 1}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	bad := packet(64, 0)
	bad[0] = 0xff
	for i := range 5 {
		a.Inject(bad)
		a.Inject(packet(64, uint64(i+1)))
	}
	seen := map[uint64]bool{}
	for range 5 {
		seen[seqOf(receive(t, b).Data)] = true
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	ab, _ := l.Stats()
	if len(seen) != 5 || ab.WriteErrors != 5 || ab.Packets != 10 {
		t.Fatalf("received %v, %d write errors, %d packets released; want 5 good, 5 errors, 10", seen, ab.WriteErrors, ab.Packets)
	}
}

func TestNewLinkRejectsBadConfig(t *testing.T) {
	a, b := wanemtest.NewDevice(1), wanemtest.NewDevice(1)
	_, err := NewLink(a, b, Config{}, Config{LossPct: 150})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "B→A") {
		t.Fatalf("NewLink error %v: want ErrInvalidConfig naming direction B→A", err)
	}
	if _, err := NewLink(nil, b, Config{}, Config{}); err == nil {
		t.Fatal("NewLink accepted a nil device")
	}
}

// retryTiming runs a real-time measurement up to three times and fails only
// if every attempt misses: a broken emulator always does, a busy host not.
func retryTiming(t *testing.T, attempt func() error) {
	t.Helper()
	var errs []error
	for i := range 3 {
		err := attempt()
		if err == nil {
			return
		}
		t.Logf("attempt %d: %v", i+1, err)
		errs = append(errs, err)
	}
	t.Fatalf("all attempts missed the bounds: %v", errors.Join(errs...))
}

func TestLinkDelayRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("timing-sensitive: real-time delay")
	}
	const delayAB, delayBA = 20 * time.Millisecond, 10 * time.Millisecond
	const slack = 10 * time.Millisecond
	retryTiming(t, func() error {
		a, b, l, stop := startLink(t, Config{Delay: delayAB}, Config{Delay: delayBA})
		defer stop()
		const n = 20
		var errs []error
		for i := range n {
			for _, d := range []struct {
				name     string
				from, to *wanemtest.Device
				delay    time.Duration
			}{{"A→B", a, b, delayAB}, {"B→A", b, a, delayBA}} {
				sent := monotime.Now()
				d.from.Inject(packet(100, uint64(i)))
				p := receive(t, d.to)
				if seqOf(p.Data) != uint64(i) {
					t.Fatalf("%s: received seq %d, want %d", d.name, seqOf(p.Data), i)
				}
				// A releaser that is awake anyway may write a packet up
				// to EarlyRelease before its time, never earlier.
				if got := p.At.Sub(sent); got < d.delay-EarlyRelease || got > d.delay+slack {
					errs = append(errs, fmt.Errorf("%s packet %d took %v, want %v … %v", d.name, i, got, d.delay-EarlyRelease, d.delay+slack))
				}
			}
		}
		ab, ba := l.Stats()
		t.Logf("release lateness: A→B max %v, B→A max %v; early at most %v and %v", ab.Lateness.Max, ba.Lateness.Max, ab.EarlyMax, ba.EarlyMax)
		if ab.EarlyMax > EarlyRelease || ba.EarlyMax > EarlyRelease {
			t.Fatalf("released %v and %v early, more than EarlyRelease %v", ab.EarlyMax, ba.EarlyMax, EarlyRelease)
		}
		if ab.Lateness.Count() != n || ba.Lateness.Count() != n {
			t.Fatalf("lateness recorded for %d and %d packets, want %d", ab.Lateness.Count(), ba.Lateness.Count(), n)
		}
		return errors.Join(errs...)
	})
}

func TestLinkRateRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("timing-sensitive: real-time rate")
	}
	const rateBps, size, n = 50_000_000, 1500, 2000 // 0.48 s at the rate
	retryTiming(t, func() error {
		a, b, l, stop := startLink(t, Config{RateBps: rateBps, QueueBytes: 4 << 20}, Config{})
		defer stop()
		for i := range n {
			if !a.Inject(packet(size, uint64(i))) {
				t.Fatalf("inject %d: device full", i)
			}
		}
		var first, last monotime.Time
		for i := range n {
			p := receive(t, b)
			if seqOf(p.Data) != uint64(i) {
				t.Fatalf("received seq %d at position %d", seqOf(p.Data), i)
			}
			if i == 0 {
				first = p.At
			}
			last = p.At
		}
		ab, _ := l.Stats()
		if ab.Packets != n || ab.Bytes != n*size || ab.QueueDrops != 0 {
			t.Fatalf("stats %+v, want %d packets, %d bytes, no drops", ab, n, n*size)
		}
		// n-1 packets were serialized between the first and the last write.
		got := float64((n-1)*size*8) / last.Sub(first).Seconds()
		t.Logf("rate %.3f Mbit/s; release lateness max %v, p99 ≤ %v", got/1e6, ab.Lateness.Max, ab.Lateness.Quantile(0.99))
		if got < 0.95*rateBps || got > 1.05*rateBps {
			return fmt.Errorf("rate %.2f Mbit/s, want 50 ± 5%%", got/1e6)
		}
		return nil
	})
}

func TestSleepUntilIsNeverEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("timing-sensitive: real-time sleeps")
	}
	// sleepUntil translates between clocks to within tens of ns; allow
	// some slack, but a wrong translation would be off by far more.
	const slack = 20 * time.Microsecond
	var worst time.Duration
	for i := range 20 {
		target := clockNow().Add(time.Duration(i%5+1) * 200 * time.Microsecond)
		sleepUntil(target)
		late := clockNow().Sub(target)
		if late < -slack {
			t.Fatalf("sleepUntil woke %v early", -late)
		}
		worst = max(worst, late)
	}
	t.Logf("worst wake-up lateness %v", worst)
}

func TestLinkRunsAgainAfterCancel(t *testing.T) {
	a, b := wanemtest.NewDevice(16), wanemtest.NewDevice(16)
	l, err := NewLink(a, b, Config{Delay: 50 * time.Millisecond}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for round := range uint64(3) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		a.Inject(packet(64, round))
		// Round 0 stops before its packet is due; it stays in the pipe
		// (or the device) and comes out first in round 1.
		for round > 0 && want <= round {
			if got := seqOf(receive(t, b).Data); got != want {
				t.Fatalf("round %d: received seq %d, want %d", round, got, want)
			}
			want++
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run returned %v after cancel, want nil", round, err)
		}
	}
}

// TestLinkOutage takes a running link down from another goroutine: packets
// are dropped and counted, and flow both ways again after SetDown(false).
func TestLinkOutage(t *testing.T) {
	a, b, l, _ := startLink(t, Config{}, Config{})
	done := make(chan struct{})
	go func() { l.SetDown(true); close(done) }()
	<-done
	const n = 20
	for i := range n {
		a.Inject(packet(100, uint64(i)))
		b.Inject(packet(100, uint64(100+i)))
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		ab, ba := l.Stats()
		if ab.OutageDrops == n && ba.OutageDrops == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outage drops A→B %d, B→A %d after 2 s; want %d each", ab.OutageDrops, ba.OutageDrops, n)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case p := <-b.Written():
		t.Fatalf("B received seq %d while the link was down", seqOf(p.Data))
	case p := <-a.Written():
		t.Fatalf("A received seq %d while the link was down", seqOf(p.Data))
	case <-time.After(20 * time.Millisecond):
	}
	l.SetDown(false)
	a.Inject(packet(100, 7))
	b.Inject(packet(100, 8))
	if p := receive(t, b); seqOf(p.Data) != 7 {
		t.Fatalf("B received seq %d after the outage, want 7", seqOf(p.Data))
	}
	if p := receive(t, a); seqOf(p.Data) != 8 {
		t.Fatalf("A received seq %d after the outage, want 8", seqOf(p.Data))
	}
	if ab, ba := l.Stats(); ab.Packets != 1 || ba.Packets != 1 || ab.OutageDrops != n || ba.OutageDrops != n {
		t.Fatalf("stats A→B %+v, B→A %+v; want 1 packet and %d outage drops each way", ab, ba, n)
	}
}

// TestLinkWakesAnIdleReleaser sends packets one at a time, so the releaser
// waits for the reader's wake-up before each: none may be left waiting.
func TestLinkWakesAnIdleReleaser(t *testing.T) {
	leaktest.Check(t)
	a, b, _, stop := startLink(t, Config{}, Config{})
	for i := range uint64(300) {
		a.Inject(packet(64, i))
		if got := seqOf(receive(t, b).Data); got != i {
			t.Fatalf("received seq %d, want %d", got, i)
		}
		if i%3 == 0 {
			time.Sleep(100 * time.Microsecond) // let it reach the wait
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}
