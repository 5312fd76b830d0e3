package stack

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/faketime"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/wanopt/wanopt/flow"
)

// stallLink passes packets through, except while stalled: then it holds
// them and delivers them together when the stall ends, in order, as an
// edge does with the ACKs it reads from its TUN when it was not scheduled
// for a few milliseconds. It loses nothing.
type stallLink struct {
	gstack.LinkEndpoint

	mu      sync.Mutex
	stalled bool
	held    []*gstack.PacketBuffer
	stalls  int // stalls that held at least one packet
}

func (l *stallLink) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stalled {
		for _, p := range pkts.AsSlice() {
			l.held = append(l.held, p.IncRef())
		}
		return pkts.Len(), nil
	}
	return l.LinkEndpoint.WritePackets(pkts)
}

// stall holds what is written for d, then delivers it.
func (l *stallLink) stall(d time.Duration) {
	l.mu.Lock()
	l.stalled = true
	l.mu.Unlock()
	time.Sleep(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stalled = false
	if len(l.held) == 0 {
		return
	}
	l.stalls++
	var list gstack.PacketBufferList
	for _, p := range l.held {
		list.PushBack(p)
	}
	l.LinkEndpoint.WritePackets(list) // under mu: nothing overtakes them
	list.DecRef()
	clear(l.held)
	l.held = l.held[:0]
}

// TestLateACKsNoSpuriousRetransmit: a download through the stack over a
// link that loses nothing, but whose ACKs from the client now and then
// (8 ms in every 100) arrive late, all at once, as an edge that was not
// scheduled reads them. Without the timer floor (minTimer 0) gVisor's
// tail loss probe fires spuriously at least once per stall; the test
// allows one retransmit for every two stalls.
func TestLateACKsNoSpuriousRetransmit(t *testing.T) {
	const wantStalls = 20
	far := &endlessFar{genFar: newGenFar(nil, nil), stop: make(chan struct{})}
	a, b := pipe.New("", "", 1500)
	la := &stallLink{LinkEndpoint: a}
	cfg := Config{MTU: 1500, Logger: quiet, KeepAliveIdle: -1}
	st, err := NewWithEndpoint(t.Context(), b, farDialer{far}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli := plainHost(t, la, [4]byte{198, 18, 1, 2})
	t.Cleanup(func() { st.Close() })

	c := dialThrough(t, cli)
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	go func() { // stall the client's ACKs 8 ms in every 100 ms, then end the download
		defer close(far.stop)
		for {
			time.Sleep(100 * time.Millisecond)
			la.stall(8 * time.Millisecond)
			la.mu.Lock()
			n := la.stalls
			la.mu.Unlock()
			if n >= wantStalls {
				return
			}
		}
	}()
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("download after %d bytes: %v", n, err)
	}
	t.Logf("%d MiB down with %d stalls of the ACKs; stack: %s", n>>20, wantStalls, recoveryStats(st.s))
	if r := st.s.Stats().TCP.Retransmits.Value(); r*2 > wantStalls {
		t.Errorf("%d retransmits for %d stalls of the ACKs on a link that lost nothing (%s)", r, wantStalls, recoveryStats(st.s))
	}
}

// endlessFar is a far side that sends until stop is closed (what it
// sends is whatever the relay's buffer holds).
type endlessFar struct {
	*genFar
	stop chan struct{}
}

func (f *endlessFar) Read(b []byte) (int, error) {
	select {
	case <-f.stop:
		return 0, io.EOF
	default:
		return len(b), nil
	}
}

type farDialer struct{ far flow.Conn }

func (d farDialer) Dial(context.Context, netip.AddrPort, netip.AddrPort) (flow.Conn, error) {
	return d.far, nil
}

// TestTimerFloor: the netstack's timers wait at least minTimer, whether
// armed by AfterFunc or by Reset, longer ones are unchanged, and one of
// zero fires at once.
func TestTimerFloor(t *testing.T) {
	mc := faketime.NewManualClock()
	c := flooredClock{Clock: mc, floor: minTimer}
	var fired atomic.Int32
	// firesAfter checks that the timer armed last fires d from now, not
	// a microsecond earlier (its firing is the count's want-th).
	firesAfter := func(what string, d time.Duration, want int32) {
		t.Helper()
		mc.Advance(d - time.Microsecond)
		if fired.Load() != want-1 {
			t.Fatalf("%s fired before %v", what, d)
		}
		mc.Advance(time.Microsecond)
		if fired.Load() != want {
			t.Fatalf("%s did not fire at %v", what, d)
		}
	}
	tm := c.AfterFunc(time.Millisecond, func() { fired.Add(1) })
	firesAfter("a 1 ms timer", minTimer, 1)
	tm.Reset(time.Microsecond)
	firesAfter("a timer Reset to 1 µs", minTimer, 2)
	long := 3 * minTimer
	c.AfterFunc(long, func() { fired.Add(1) })
	firesAfter("a timer longer than the floor", long, 3)
	// Zero is "now" (TIME-WAIT, which the stack sets to none), whether
	// armed by AfterFunc or by Reset.
	tm = c.AfterFunc(0, func() { fired.Add(1) })
	mc.Advance(0)
	if fired.Load() != 4 {
		t.Fatal("a timer of 0 did not fire at once")
	}
	tm.Reset(0)
	mc.Advance(0)
	if fired.Load() != 5 {
		t.Fatal("a timer Reset to 0 did not fire at once")
	}
}
