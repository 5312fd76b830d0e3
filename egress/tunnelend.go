package egress

import (
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/stream"
)

// TunnelEnd is a tunnel stream as a relayed flow's WAN end: it says what
// holds its writes back in package flow's words (flow.SendLimiter), so
// that flow need not know the tunnel. Both edges relay through it: the
// far edge here, the near edge's dialer (package ingress) too.
type TunnelEnd struct{ *driver.Stream }

var _ flow.SendLimiter = TunnelEnd{}

// SendLimit is the stream's send limit (driver.Stream.SendLimit).
func (e TunnelEnd) SendLimit() flow.SendLimit {
	switch e.Stream.SendLimit() {
	case stream.SendPeerWindow:
		return flow.SendPeerWindow
	case stream.SendCongestion:
		return flow.SendCongestion
	case stream.SendMemory:
		return flow.SendMemory
	}
	return flow.SendFree
}
