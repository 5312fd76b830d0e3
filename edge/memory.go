package edge

import "github.com/wanopt/wanopt/stack"

// Defaults and limits of the memory budget (Shared.MemoryMiB).
const (
	// DefaultMemoryMiB gives the tunnel a 96 MiB stream budget (250 Mbit/s
	// at 1 s of RTT three times over), streaming flows LAN buffers of
	// 1 MiB each way, and room for about 1,290 flows (see PlanMemory): a
	// branch of a few hundred users. It is a ceiling, not an allocation.
	DefaultMemoryMiB = 384
	MinMemoryMiB     = 16
	MaxMemoryMiB     = 1 << 20
	// FixedOverheadMiB is what an edge's resident memory holds beside its
	// budget: the Go runtime and code, the netstack, the packet buffers,
	// the metrics library, the garbage collector's headroom.
	// TestEdgeMemoryBudget (cmd/wanopt) checks that an edge at a 16 MiB
	// budget with 1,000 flows pressing stays within both.
	FixedOverheadMiB = 40
)

// MemoryPlan is how an edge splits its memory budget, computed once when
// the edge is built (PlanMemory) and handed to the flows' budget, the
// stack, the tunnels and the Go runtime.
type MemoryPlan struct {
	// TunnelBytes bounds the tunnel's stream buffers and windows beyond
	// their floors, over all flows (tunnel stream.Config.BudgetBytes); a
	// hub's branches and a near edge's upstreams share it evenly.
	TunnelBytes uint64
	// FlowFloorBytes is what each flow reserves at open (flow.Budget);
	// FlowLimit flows fit the floors' share. GrantBytes bounds the grants
	// of streaming flows over all flows.
	FlowFloorBytes, GrantBytes int64
	// FlowLimit is how many flows the edge admits at once: as many floors
	// as half the budget holds (about 1,290 at the default 384 MiB, 53 at
	// 16 MiB), at most MaxFlows. Opens beyond it are refused.
	FlowLimit int
	// Receive and Send are an intercepted connection's buffers: Default
	// without a grant, Max with one.
	Receive, Send stack.BufferRange
	// RuntimeLimitBytes is the soft memory limit for the Go runtime
	// (runtime/debug.SetMemoryLimit) of a process running this one edge:
	// the budget plus the part of the fixed overhead the runtime manages,
	// so that garbage is collected before the process outgrows budget and
	// overhead.
	RuntimeLimitBytes int64
}

// The pieces of a flow's floor (FlowFloorBytes): what one flow can pin at
// its smallest buffers while neither end reads.
const (
	// streamFloorBytes is a tunnel stream's receive window and send buffer
	// at open, each one 32 KiB chunk (stream.DefaultChunkBytes): the
	// floors the stream package grants regardless of the budget. The
	// receive window is also the credit the peer assumes, so both edges
	// use this value. A new flow does not wait on it: the far edge's
	// answer carries a window sized from the path.
	streamFloorBytes = 32 << 10
	// lanFloorBytes is an intercepted connection's receive and send
	// buffer without a grant: a 8 KiB window, enough for a keystroke or a
	// request, on a LAN whose round trip is short.
	lanFloorBytes = 16 << 10
	// lanMinBytes is the least an intercepted connection's buffers shrink
	// to.
	lanMinBytes = 4 << 10
	// relayFloorBytes is the relay's two small copy buffers (flow.Relay).
	relayFloorBytes = 2 * 4 << 10
	// flowOverheadBytes is what a flow costs beyond its buffers: the
	// netstack endpoint and its queues, the stream's state, table entries
	// and two or three goroutine stacks. TestEdgeMemoryBudget (cmd/wanopt)
	// logs the RSS per admitted flow.
	flowOverheadBytes = 48 << 10
	flowFloorBytes    = 2*streamFloorBytes + 2*lanFloorBytes + relayFloorBytes + flowOverheadBytes
)

// PlanMemory splits a budget of memoryMiB for at most maxFlows flows: a
// quarter for the tunnel's stream buffers and windows beyond their
// floors, a quarter for the grants of streaming flows, and half for the
// floors of admitted flows, which sets how many flows the edge admits
// (FlowLimit). Every share is a hard cap, so the flows' memory never
// exceeds the budget, whatever they hold. A grant lets a flow's LAN
// buffers grow to what the LAN side needs: its round trip is short, so
// they need not hold the WAN's bandwidth-delay product, which the stream
// windows do (1 MiB holds 32 ms at 250 Mbit/s). The size of a grant sets
// how many flows stream with large buffers at once; a flow without one
// copies 4 KiB at a time, a TUN write and a client ACK each. At 1 MiB, 32
// flows sharing 250 Mbit/s all hold a grant (`wanbench cisco --streams
// 32`).
func PlanMemory(memoryMiB, maxFlows int) MemoryPlan {
	total := int64(memoryMiB) << 20
	clamp := func(v, lo, hi int64) int { return int(max(lo, min(v, hi))) }
	grown := clamp(total/256, 256<<10, 1<<20)
	return MemoryPlan{
		TunnelBytes:       uint64(total / 4),
		GrantBytes:        total / 4,
		FlowFloorBytes:    flowFloorBytes,
		FlowLimit:         int(min(int64(maxFlows), total/2/flowFloorBytes)),
		Receive:           stack.BufferRange{Min: lanMinBytes, Default: lanFloorBytes, Max: grown},
		Send:              stack.BufferRange{Min: lanMinBytes, Default: lanFloorBytes, Max: grown},
		RuntimeLimitBytes: int64(memoryMiB+FixedOverheadMiB/2) << 20,
	}
}

// share is one of n tunnels' even part of the stream budget.
func (p MemoryPlan) share(n int) uint64 { return p.TunnelBytes / uint64(max(1, n)) }
