package flow

import "sync/atomic"

// Wait is what one direction of a relayed flow is blocked on now.
type Wait uint32

const (
	WaitNone  Wait = iota // copying, or not started
	WaitRead              // for its source to send
	WaitWrite             // for its destination to take
)

// waitState is one direction's Wait, set by its copy loop.
type waitState struct{ v atomic.Uint32 }

func (w *waitState) set(v Wait) {
	if w != nil {
		w.v.Store(uint32(v))
	}
}

// RelayState records what each direction of a Relay waits for
// (RelayOptions.State), for saying what limits the flow (Why).
type RelayState struct {
	lanToWAN, wanToLAN waitState
	// wan is the tunnel's end, asked what holds its writes back.
	wan atomic.Pointer[SendLimiter]
}

// A SendLimiter is a flow end that can say what holds its writes back:
// the tunnel's end, through the tunnel side's adapter (egress.TunnelEnd).
type SendLimiter interface {
	SendLimit() SendLimit
}

// SendLimit is what holds back the bytes written to a SendLimiter now.
type SendLimit uint8

const (
	// SendFree: nothing waits to be sent and there is room.
	SendFree SendLimit = iota
	// SendPeerWindow: bytes wait for the peer's credit: the receiving
	// side reads no faster.
	SendPeerWindow
	// SendCongestion: bytes wait for the congestion control: the path's
	// rate holds them.
	SendCongestion
	// SendMemory: the buffer is at its floor because the memory budget
	// has nothing left to give.
	SendMemory
)

// Limit names what holds a flow back now, as one edge sees it.
type Limit uint8

const (
	LimitIdle      Limit = iota // nothing moves and nothing waits
	LimitLANWindow              // the LAN end reads no faster (its receive window is full)
	LimitLANSender              // the LAN end sends no faster
	LimitPeerEdge               // the other edge's side: see its answer
	LimitTunnel                 // the tunnel's congestion control: the path's rate
	LimitMemory                 // the memory budget
)

// Name is the limit's word, with the LAN end and the other edge named as
// this edge sees them (near edge: "client", "far-edge"; far edge:
// "server", "near-edge").
func (l Limit) Name(lan, peerEdge string) string {
	switch l {
	case LimitLANWindow:
		return lan + "-window"
	case LimitLANSender:
		return lan + "-sends"
	case LimitPeerEdge:
		return peerEdge
	case LimitTunnel:
		return "tunnel"
	case LimitMemory:
		return "memory"
	}
	return "idle"
}

// Why says what limits the flow now, in the direction that moves more
// (lanToWANBps against wanToLANBps, its current rates) or, when neither
// moves, in one that is stuck writing. Each edge sees its half: the near
// edge knows whether its client reads, the far edge whether its server
// sends and whether the tunnel or the other edge's window holds the bytes.
func (s *RelayState) Why(lanToWANBps, wanToLANBps uint64) Limit {
	if s == nil {
		return LimitIdle
	}
	up, down := Wait(s.lanToWAN.v.Load()), Wait(s.wanToLAN.v.Load())
	var wanLimit SendLimit
	if l := s.wan.Load(); l != nil {
		wanLimit = (*l).SendLimit()
	}
	lanToWAN := lanToWANBps > wanToLANBps
	switch {
	case lanToWANBps == 0 && wanToLANBps == 0:
		switch {
		case down == WaitWrite:
			lanToWAN = false
		case up == WaitWrite:
			lanToWAN = true
		default:
			return LimitIdle
		}
	}
	if !lanToWAN {
		if down == WaitWrite {
			return LimitLANWindow
		}
		return LimitPeerEdge // the bytes do not arrive: the other side holds them
	}
	if up == WaitRead {
		return LimitLANSender
	}
	switch wanLimit {
	case SendPeerWindow:
		return LimitPeerEdge
	case SendMemory:
		return LimitMemory
	case SendCongestion:
		return LimitTunnel
	}
	if up == WaitWrite {
		return LimitTunnel
	}
	return LimitLANSender
}
