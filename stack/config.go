package stack

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/wanopt/wanopt/flow"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// BufferRange bounds a TCP buffer: new endpoints start at Default and
// auto-tuning moves the receive buffer between Min and Max. The tunnel sizes
// these from its bandwidth-delay product and memory budget.
type BufferRange struct {
	Min, Default, Max int
}

func (r BufferRange) valid() bool {
	return r.Min > 0 && r.Min <= r.Default && r.Default <= r.Max
}

// PacketTap receives a copy of every packet crossing the NIC (both
// directions), e.g. a *tun.Capture. pkt is only valid during the call.
type PacketTap interface {
	WritePacket(ts time.Time, pkt []byte) error
}

// Config configures a Stack. The zero value of each field means its
// documented default.
type Config struct {
	// MTU of the link; required for New (the TUN device's MTU).
	MTU int
	// MaxInFlight is the number of SYNs the forwarder handles at once (each
	// waits for Dial). SYNs beyond it are dropped silently by gVisor and
	// counted in Stats.ForwarderDrops. Default 1024.
	MaxInFlight int
	// DialTimeout bounds each Dial call. Default 30s.
	DialTimeout time.Duration
	// KeepAliveIdle is how long a client connection may be silent before
	// the stack probes it with TCP keepalives (4 probes, every 30 s or
	// every KeepAliveIdle if shorter), so that flows of vanished clients
	// end. Default 5 minutes; negative disables.
	KeepAliveIdle time.Duration
	// IdleTimeout resets a flow that moved no byte either way for this
	// long (see flow.RelayOptions.IdleTimeout); 0: never.
	IdleTimeout time.Duration
	// ReceiveBuffer and SendBuffer are the TCP buffer ranges. Defaults are
	// gVisor's: 4 KiB, 1 MiB, 4 MiB (receive) and 4 KiB, 1 MiB, 6 MiB (send).
	ReceiveBuffer, SendBuffer BufferRange
	// NoModerateReceiveBuffer turns receive-buffer auto-tuning off.
	NoModerateReceiveBuffer bool
	// Budget, if set, holds the memory of the flows: each intercepted
	// connection reserves its floor before its far side is dialled (a
	// connection the budget cannot hold is refused with a RST), and its
	// buffers start at ReceiveBuffer.Default and SendBuffer.Default with
	// auto-tuning off, growing to the Max of each only with a grant (see
	// flow.Budget). Connections opened with DialTCP get the same sizes;
	// their floor is their caller's to reserve.
	Budget *flow.Budget
	// NoSACK turns selective acknowledgements off.
	NoSACK bool
	// CongestionControl of the intercepted connections: "reno" (default)
	// or "cubic". On the short LAN side CUBIC runs in its TCP-friendly
	// region, where it is Reno anyway, and gVisor's CUBIC overflows its
	// window after months without a congestion event
	// (TestCubicAfterLongIdle).
	CongestionControl string
	// QueueLen is the length of the NIC's outbound FIFO queue; packets are
	// written to the TUN by the queue's own goroutine, not the TCP one.
	// Default 4096.
	QueueLen int
	// Divert, if set, is offered every IPv4 and IPv6 packet from the
	// link that is not TCP before the netstack sees it, and may take it
	// (see DivertFunc); Stack.WritePacket sends the replies. Without it
	// the netstack gets them, as it gets TCP. Off by default.
	Divert DivertFunc
	// DivertTCP, if set, is offered every TCP packet from the link
	// before the netstack sees it, and may take it (see DivertFunc): the
	// packets of flows carried unterminated. It runs for every TCP
	// packet, so it must return quickly when it has nothing to take. Off
	// by default.
	DivertTCP DivertFunc
	// Tap, if set, sees every packet crossing the NIC. Off by default.
	Tap PacketTap
	// Logger receives the stack's logs. Default slog.Default().
	Logger *slog.Logger

	// clock drives gVisor's timers; nil is the real clock. Tests set a
	// manual one to cover hours of TCP timers at once.
	clock tcpip.Clock
}

func (c *Config) setDefaults() error {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 30 * time.Second
	}
	if c.KeepAliveIdle == 0 {
		c.KeepAliveIdle = 5 * time.Minute
	}
	if c.ReceiveBuffer == (BufferRange{}) {
		c.ReceiveBuffer = BufferRange{4 << 10, 1 << 20, 4 << 20}
	}
	if c.SendBuffer == (BufferRange{}) {
		c.SendBuffer = BufferRange{4 << 10, 1 << 20, 6 << 20}
	}
	if c.CongestionControl == "" {
		c.CongestionControl = "reno"
	}
	if c.QueueLen == 0 {
		c.QueueLen = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.MaxInFlight < 0 || c.DialTimeout < 0 || c.QueueLen < 0:
		return fmt.Errorf("stack config: negative MaxInFlight, DialTimeout or QueueLen: use positive values or 0 for the default")
	case !c.ReceiveBuffer.valid() || !c.SendBuffer.valid():
		return fmt.Errorf("stack config: buffer ranges must satisfy 0 < Min <= Default <= Max (receive %+v, send %+v)", c.ReceiveBuffer, c.SendBuffer)
	case c.CongestionControl != "cubic" && c.CongestionControl != "reno":
		return fmt.Errorf("stack config: congestion control %q unknown: use cubic or reno", c.CongestionControl)
	}
	return nil
}
