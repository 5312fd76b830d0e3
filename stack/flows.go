package stack

import (
	"cmp"
	"github.com/wanopt/wanopt/flow"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/internal/meter"
)

// FlowState is where a flow is in its life.
type FlowState int32

// Flow states, in order.
const (
	// FlowDialing: the SYN is held while the Dialer opens the far side.
	FlowDialing FlowState = iota
	// FlowHandshake: the far side is connected; the client's handshake is
	// being completed.
	FlowHandshake
	// FlowEstablished: data flows both ways.
	FlowEstablished
	// FlowClientClosed: the client sent its FIN; the far side may still send.
	FlowClientClosed
	// FlowFarClosed: the far side sent its FIN; the client may still send.
	FlowFarClosed
	// FlowClosing: both directions are done or one failed; resources are
	// being released.
	FlowClosing
)

var flowStateNames = [...]string{"dialing", "handshake", "established", "client-fin", "far-fin", "closing"}

func (s FlowState) String() string {
	if int(s) < len(flowStateNames) {
		return flowStateNames[s]
	}
	return "unknown"
}

// FlowInfo is a snapshot of one flow, for `wanopt flows`.
type FlowInfo struct {
	ID       uint64
	Src, Dst netip.AddrPort
	State    FlowState
	// BytesUp counts bytes from the client to the far side, BytesDown the
	// other way.
	BytesUp, BytesDown uint64
	// RateUpBps and RateDownBps are the rates over the last interval of
	// SampleRates, in bits per second.
	RateUpBps, RateDownBps uint64
	Started                time.Time
	Age                    time.Duration
	// Why says what limits the flow now, from this edge's side (see
	// flow.RelayState.Why).
	Why flow.Limit
}

// tracked is one intercepted flow in the table.
type tracked struct {
	id        uint64
	src, dst  netip.AddrPort
	started   time.Time
	state     atomic.Int32
	up, down  atomic.Uint64
	closeSide atomic.Int32 // bit 1: client FIN passed on, bit 2: far FIN passed on
	relay     flow.RelayState

	rateUp, rateDown meter.Rate
}

func (f *tracked) setState(s FlowState) { f.state.Store(int32(s)) }

// halfClosed records that one direction finished cleanly and updates the
// state accordingly.
func (f *tracked) halfClosed(bit int32) {
	for {
		old := f.closeSide.Load()
		if f.closeSide.CompareAndSwap(old, old|bit) {
			switch old | bit {
			case 1:
				f.setState(FlowClientClosed)
			case 2:
				f.setState(FlowFarClosed)
			default:
				f.setState(FlowClosing)
			}
			return
		}
	}
}

// flowTable holds the flows from their SYN until their resources are
// released. Safe for concurrent use.
type flowTable struct {
	mu    sync.Mutex
	next  uint64
	flows map[uint64]*tracked
}

func (t *flowTable) add(src, dst netip.AddrPort, now time.Time) *tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flows == nil {
		t.flows = make(map[uint64]*tracked)
	}
	t.next++
	f := &tracked{id: t.next, src: src, dst: dst, started: now}
	t.flows[f.id] = f
	return f
}

func (t *flowTable) remove(f *tracked) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.flows, f.id)
}

func (t *flowTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.flows)
}

// sample updates every flow's rates, interval after the previous call.
func (t *flowTable) sample(interval time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.flows {
		f.rateUp.Sample(f.up.Load(), interval)
		f.rateDown.Sample(f.down.Load(), interval)
	}
}

// snapshot returns the flows ordered by ID (oldest first).
func (t *flowTable) snapshot(now time.Time) []FlowInfo {
	t.mu.Lock()
	out := make([]FlowInfo, 0, len(t.flows))
	fs := make([]*tracked, 0, len(t.flows))
	for _, f := range t.flows {
		fs = append(fs, f)
		out = append(out, FlowInfo{
			ID: f.id, Src: f.src, Dst: f.dst,
			State:   FlowState(f.state.Load()),
			BytesUp: f.up.Load(), BytesDown: f.down.Load(),
			RateUpBps: f.rateUp.Bps(), RateDownBps: f.rateDown.Bps(),
			Started: f.started, Age: now.Sub(f.started),
		})
	}
	t.mu.Unlock()
	// Asking the tunnel's end what holds it is a call into its driver:
	// outside the table's lock.
	for i, f := range fs {
		out[i].Why = f.relay.Why(out[i].RateUpBps, out[i].RateDownBps)
	}
	slices.SortFunc(out, func(a, b FlowInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
