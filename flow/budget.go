package flow

import (
	"sync/atomic"
	"time"
)

// Budget is the memory an edge's flows may hold, apart from the tunnel's
// stream buffers (which have a budget of their own). Every admitted flow
// reserves a floor: what it can pin at its smallest buffers even if
// neither end reads. A flow that streams takes a grant on top, for a large
// copy buffer and large netstack buffers, while the grants' share has
// room; without one it moves at its floor's pace. (Toward the tunnel the
// large buffer is room lent by the stream: the grant is counted but not
// allocated here.) So flows never hold more than maxFlows floors plus the
// grants' share, and a flow is refused at open (Admit) rather than
// admitted into memory the edge does not have. A nil *Budget admits and
// grants everything.
type Budget struct {
	maxFlows      int64
	floorBytes    int64
	grantLimit    int64
	flows         atomic.Int64
	grantedBytes  atomic.Int64
	refused       atomic.Uint64
	grants        atomic.Uint64
	grantsRefused atomic.Uint64
}

// NewBudget returns a budget admitting maxFlows flows of floorBytes each,
// and grants of at most grantLimitBytes over all flows.
func NewBudget(maxFlows int, floorBytes, grantLimitBytes int64) *Budget {
	return &Budget{maxFlows: int64(maxFlows), floorBytes: floorBytes, grantLimit: grantLimitBytes}
}

// BudgetStats are a Budget's figures.
type BudgetStats struct {
	// Flows hold their floor now, of at most MaxFlows; FloorBytes each.
	Flows, MaxFlows, FloorBytes int64
	// GrantedBytes of GrantLimitBytes are held by streaming flows.
	GrantedBytes, GrantLimitBytes int64
	// FlowsRefused counts opens refused for want of a floor; Grants the
	// grants taken; GrantsRefused the times a streaming flow asked for one
	// and was held to its floor.
	FlowsRefused, Grants, GrantsRefused uint64
}

// UsedBytes is the memory the budget accounts for now: the floors of the
// admitted flows and the grants.
func (s BudgetStats) UsedBytes() int64 { return s.Flows*s.FloorBytes + s.GrantedBytes }

// LimitBytes is the most the budget lets flows hold.
func (s BudgetStats) LimitBytes() int64 { return s.MaxFlows*s.FloorBytes + s.GrantLimitBytes }

// Stats returns b's figures (zero for a nil Budget).
func (b *Budget) Stats() BudgetStats {
	if b == nil {
		return BudgetStats{}
	}
	return BudgetStats{Flows: b.flows.Load(), MaxFlows: b.maxFlows, FloorBytes: b.floorBytes,
		GrantedBytes: b.grantedBytes.Load(), GrantLimitBytes: b.grantLimit,
		FlowsRefused: b.refused.Load(), Grants: b.grants.Load(), GrantsRefused: b.grantsRefused.Load()}
}

// Admit reserves a new flow's floor. It reports false, and counts a
// refusal, when maxFlows flows hold theirs: the caller refuses the flow.
// Each true must be matched by one Leave.
func (b *Budget) Admit() bool {
	if b == nil {
		return true
	}
	if !reserve(&b.flows, 1, b.maxFlows) {
		b.refused.Add(1)
		return false
	}
	return true
}

// Leave releases the floor of a flow Admit let in.
func (b *Budget) Leave() {
	if b != nil {
		b.flows.Add(-1)
	}
}

// reserve adds n to v if the sum stays within limit.
func reserve(v *atomic.Int64, n, limit int64) bool {
	for {
		old := v.Load()
		if old+n > limit {
			return false
		}
		if v.CompareAndSwap(old, old+n) {
			return true
		}
	}
}

// A Resizer is a Conn with buffers of its own (a netstack endpoint) that
// start at a floor and may grow while a direction streams. The relay
// charges the growth to the Budget: it calls Grow when a grant of
// GrowBytes was taken for that direction, and Shrink when giving it back.
type Resizer interface {
	// GrowBytes is what growing the read (reading=true: data from this
	// end) or the write buffers adds at most.
	GrowBytes(reading bool) int64
	// Grow enlarges the buffers of one direction.
	Grow(reading bool)
	// Shrink returns them to their floor, and reports whether they hold
	// no more than the floor now. While they hold more (data the other
	// end has not read yet), the relay keeps the grant.
	Shrink(reading bool) bool
}

// grant is one relay direction's share of a Budget beyond its floor: a
// large copy buffer, and the growth of the LAN end's buffers in that
// direction.
type grant struct {
	budget  *Budget
	resizer Resizer // nil: the copy buffer only
	reading bool    // the direction reads from the resizer's end
	bytes   int64
	held    bool
	// burst is what the reads since lastRead's burst began returned
	// (wantsBig).
	burst    int
	lastRead time.Time
	clock    func() time.Time // tests; nil: time.Now
}

func newGrant(b *Budget, r Resizer, reading bool) *grant {
	g := &grant{budget: b, resizer: r, reading: reading, bytes: bigBuf}
	if r != nil {
		g.bytes += r.GrowBytes(reading)
	}
	return g
}

// A direction reading from a Resizer asks for a grant only once it has
// read growAfterBytes in a burst (reads no more than burstGap apart): its
// receive buffer keeps the growth until the flow ends (see Shrink), so
// only a sustained upload should take it. At the floor's small window
// reads never fill the buffer, so full reads cannot be the signal.
const (
	growAfterBytes = 64 << 10
	burstGap       = 50 * time.Millisecond
)

// wantsBig notes a read of k bytes into a small buffer of n, and reports
// whether the direction should now ask for the large one (take): after a
// read that filled the buffer, or for a direction reading from a Resizer,
// after growAfterBytes in a burst.
func (g *grant) wantsBig(k, n int) bool {
	if g == nil || g.held || g.resizer == nil || !g.reading {
		return k == n
	}
	now := time.Now()
	if g.clock != nil {
		now = g.clock()
	}
	if now.Sub(g.lastRead) > burstGap {
		g.burst = 0
	}
	g.lastRead = now
	g.burst += k
	return g.burst >= growAfterBytes
}

// take reports whether the direction may use large buffers, taking the
// grant if it does not hold it yet.
func (g *grant) take() bool {
	switch {
	case g == nil || g.budget == nil:
		return true
	case g.held:
		return true
	case !reserve(&g.budget.grantedBytes, g.bytes, g.budget.grantLimit):
		g.budget.grantsRefused.Add(1)
		return false
	}
	g.held = true
	g.budget.grants.Add(1)
	if g.resizer != nil {
		g.resizer.Grow(g.reading)
	}
	return true
}

// giveBack returns the grant once the end's buffers are back at their
// floor; force returns it regardless (the flow is over).
func (g *grant) giveBack(force bool) {
	if g == nil || g.budget == nil || !g.held {
		return
	}
	if g.resizer != nil && !g.resizer.Shrink(g.reading) && !force {
		return
	}
	g.held = false
	g.budget.grantedBytes.Add(-g.bytes)
}
