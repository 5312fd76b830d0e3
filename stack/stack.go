package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/flow"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/qdisc/fifo"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

const nicID tcpip.NICID = 1

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("stack closed")

// Stack is a gVisor netstack on one NIC that intercepts every TCP
// connection arriving on it and relays it to the far end its flow.Dialer
// opens. Its methods are safe for concurrent use.
type Stack struct {
	cfg    Config
	log    *slog.Logger
	dialer flow.Dialer
	s      *gstack.Stack
	link   string // "offload", "fdbased" or "custom", for logs and tests
	nicEP  gstack.LinkEndpoint
	divert *divertEndpoint // nil without Config.Divert

	ctx    context.Context // cancelled by Close; parent of every Dial
	cancel context.CancelFunc
	stop   func() bool // unregisters the AfterFunc on the caller's ctx

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // forwarder handlers and copy goroutines
	flows  flowTable

	closeOnce sync.Once

	bufSizes bufferSizes // with cfg.Budget: the connections' floor and grown sizes

	syns, dialed, refused, notAllowed, unreachable, timeouts, dialErrors, handshakeFailed, idled, overBudget atomic.Uint64
}

// NewWithEndpoint builds a stack on any gVisor link endpoint carrying raw IP
// packets (a channel or pipe endpoint in tests, a custom batched endpoint).
// The stack owns ep from now on: Close closes and waits for it; Attach(nil)
// must stop inbound delivery and wait for it to stop. Options are
// applied in this order: protocols and TCP options, the forwarder handler,
// the NIC (with a FIFO queue and the optional tap), promiscuous mode and
// spoofing, then default routes for IPv4 and IPv6.
func NewWithEndpoint(ctx context.Context, ep gstack.LinkEndpoint, d flow.Dialer, cfg Config) (*Stack, error) {
	return newStack(ctx, ep, "custom", d, cfg)
}

func newStack(ctx context.Context, ep gstack.LinkEndpoint, link string, d flow.Dialer, cfg Config) (*Stack, error) {
	if d == nil {
		return nil, errors.New("stack: nil Dialer: pass the tunnel's dialer")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	st := &Stack{cfg: cfg, log: cfg.Logger, dialer: d, link: link, bufSizes: bufferSizes{
		rcvFloor: cfg.ReceiveBuffer.Default, rcvGrown: cfg.ReceiveBuffer.Max,
		sndFloor: cfg.SendBuffer.Default, sndGrown: cfg.SendBuffer.Max}}
	st.ctx, st.cancel = context.WithCancel(context.WithoutCancel(ctx))

	clock := cfg.clock
	if clock == nil {
		clock = tcpip.NewStdClock()
	}
	s := gstack.New(gstack.Options{
		NetworkProtocols:   []gstack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []gstack.TransportProtocolFactory{tcp.NewProtocol},
		Clock:              flooredClock{Clock: clock, floor: minTimer},
	})
	st.s = s
	nicCreated := false
	fail := func(what string, terr tcpip.Error) (*Stack, error) {
		if !nicCreated {
			ep.Close()
		}
		s.Close()
		s.Wait()
		st.cancel()
		return nil, fmt.Errorf("stack: %s: %s", what, terr)
	}
	if terr := st.applyTCPOptions(); terr != nil {
		return fail("set TCP options", terr)
	}
	fwd := tcp.NewForwarder(s, cfg.ReceiveBuffer.Default, cfg.MaxInFlight, st.handle)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)

	var nicEP gstack.LinkEndpoint = ep
	if cfg.Tap != nil {
		nicEP = newTapEndpoint(ep, cfg.Tap, st.log)
	}
	if cfg.Divert != nil || cfg.DivertTCP != nil {
		// Outermost, so that the tap also sees what is diverted.
		st.divert = newDivertEndpoint(nicEP, cfg.Divert, cfg.DivertTCP)
		nicEP = st.divert
	}
	qdisc := fifo.New(nicEP, 1, cfg.QueueLen)
	if terr := s.CreateNICWithOptions(nicID, nicEP, gstack.NICOptions{Name: "tun", QDisc: qdisc}); terr != nil {
		qdisc.Close()
		return fail("create NIC", terr)
	}
	nicCreated = true
	st.nicEP = nicEP
	if terr := s.SetPromiscuousMode(nicID, true); terr != nil {
		return fail("promiscuous mode", terr)
	}
	if terr := s.SetSpoofing(nicID, true); terr != nil {
		return fail("spoofing", terr)
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	st.stop = context.AfterFunc(ctx, func() { st.Close() })
	st.log.Info("stack started", "link", link, "mtu", cfg.MTU, "max_in_flight", cfg.MaxInFlight,
		"rcvbuf", cfg.ReceiveBuffer, "sndbuf", cfg.SendBuffer, "cc", cfg.CongestionControl)
	return st, nil
}

func (st *Stack) applyTCPOptions() tcpip.Error {
	cfg := st.cfg
	sack := tcpip.TCPSACKEnabled(!cfg.NoSACK)
	moderate := tcpip.TCPModerateReceiveBufferOption(!cfg.NoModerateReceiveBuffer)
	cc := tcpip.CongestionControlOption(cfg.CongestionControl)
	delay := tcpip.TCPDelayEnabled(false) // no Nagle: the far side already batched
	// No TIME-WAIT (a timer of zero: see minTimer). The client, the
	// passive closer, may reuse its port at once, and gVisor hands a new
	// SYN for a TIME-WAIT endpoint only to a listening endpoint, which the
	// forwarder is not: the SYNs would be dropped for 60 s
	// (TestPortReuseAfterServerClose). On the LAN stray segments die
	// within the RTT; a FIN the client sends again gets a reset, which
	// ends its LAST-ACK as the ACK would have.
	timeWait := tcpip.TCPTimeWaitTimeoutOption(0)
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &moderate, &cc, &delay, &timeWait} {
		if terr := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, opt); terr != nil {
			return terr
		}
	}
	return st.setBuffers(cfg.ReceiveBuffer, cfg.SendBuffer)
}

func (st *Stack) setBuffers(rcv, snd BufferRange) tcpip.Error {
	r := tcpip.TCPReceiveBufferSizeRangeOption{Min: rcv.Min, Default: rcv.Default, Max: rcv.Max}
	if terr := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &r); terr != nil {
		return terr
	}
	w := tcpip.TCPSendBufferSizeRangeOption{Min: snd.Min, Default: snd.Default, Max: snd.Max}
	return st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &w)
}

// Stats are the stack's counters since New.
type Stats struct {
	// SYNs is the number of intercepted connection requests handled;
	// ForwarderDrops the number dropped because MaxInFlight were pending.
	SYNs, ForwarderDrops uint64
	// Outcomes of Dial.
	Dialed, Refused, NotAllowed, Unreachable, Timeouts, DialErrors uint64
	// HandshakeFailed counts flows whose far side connected but whose
	// client's handshake did not complete (the client had given up).
	HandshakeFailed uint64
	// IdleTimeouts counts flows reset after Config.IdleTimeout unused.
	IdleTimeouts uint64
	// OverBudget counts connections refused because Config.Budget could
	// not hold another flow.
	OverBudget uint64
	// TUNPacketsIn and TUNPacketsOut count the packets the netstack took
	// from and gave to the device, a large (GRO or TSO) segment once.
	// TUNDrops counts packets it could not use: not TCP (nothing else is
	// intercepted), malformed, or no room to send.
	TUNPacketsIn, TUNPacketsOut, TUNDrops uint64
	// Diverted counts packets Config.Divert and Config.DivertTCP took
	// (never seen by the netstack, nor counted in TUNPacketsIn).
	Diverted uint64
	// ActiveFlows is the number of flows in the table.
	ActiveFlows int
	// TCPEndpoints is the number of TCP endpoints gVisor holds, including
	// those in TIME-WAIT.
	TCPEndpoints int
}

// sizes are the buffer sizes of the stack's connections under its budget
// (nil without one).
func (st *Stack) sizes() *bufferSizes {
	if st.cfg.Budget == nil {
		return nil
	}
	return &st.bufSizes
}

// Stats returns a snapshot of the counters.
func (st *Stack) Stats() Stats {
	var in, out, drops uint64
	if nic, ok := st.s.NICInfo()[nicID]; ok {
		n := nic.Stats
		in, out = n.Rx.Packets.Value(), n.Tx.Packets.Value()
		drops = n.MalformedL4RcvdPackets.Value() + n.TxPacketsDroppedNoBufferSpace.Value() +
			sumCounts(n.UnknownL3ProtocolRcvdPacketCounts) + sumCounts(n.UnknownL4ProtocolRcvdPacketCounts)
	}
	var diverted uint64
	if st.divert != nil {
		diverted = st.divert.diverted.Load()
	}
	return Stats{
		Diverted:        diverted,
		TUNPacketsIn:    in,
		TUNPacketsOut:   out,
		TUNDrops:        drops,
		SYNs:            st.syns.Load(),
		ForwarderDrops:  st.s.Stats().TCP.ForwardMaxInFlightDrop.Value(),
		Dialed:          st.dialed.Load(),
		Refused:         st.refused.Load(),
		NotAllowed:      st.notAllowed.Load(),
		Unreachable:     st.unreachable.Load(),
		Timeouts:        st.timeouts.Load(),
		DialErrors:      st.dialErrors.Load(),
		HandshakeFailed: st.handshakeFailed.Load(),
		IdleTimeouts:    st.idled.Load(),
		OverBudget:      st.overBudget.Load(),
		ActiveFlows:     st.flows.len(),
		TCPEndpoints:    len(st.s.RegisteredEndpoints()),
	}
}

// Flows returns a snapshot of the flow table, oldest first.
func (st *Stack) Flows() []FlowInfo { return st.flows.snapshot(time.Now()) }

// SampleRates updates the flows' current rates: the owner calls it at a
// steady interval (every second) with the time since the previous call.
// Calls must not overlap.
func (st *Stack) SampleRates(interval time.Duration) { st.flows.sample(interval) }

// enter registers a goroutine working for a flow; false after Close.
func (st *Stack) enter() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	return true
}

// Close stops the stack: pending Dial calls are cancelled, established
// flows are reset on both sides, and Close returns when every goroutine the
// stack started (its own and gVisor's, including the link endpoint's) has
// exited. The link endpoint's fd may be closed afterwards. Idempotent.
func (st *Stack) Close() error {
	st.closeOnce.Do(func() {
		if st.stop != nil {
			st.stop()
		}
		st.mu.Lock()
		st.closed = true
		st.mu.Unlock()
		st.cancel()  // resets the relayed flows (flow.Relay)
		st.s.Close() // aborts endpoints still in their handshake
		st.wg.Wait()
		// Stop inbound delivery before Wait: gVisor's Wait holds the stack
		// lock while it waits for the link endpoint, and a packet being
		// delivered may need that lock (gvisor.dev/issue/11456).
		st.nicEP.Attach(nil)
		st.s.Wait()
		st.log.Info("stack stopped")
	})
	return nil
}

// sumCounts adds up a gVisor counter map (packets per unknown protocol).
func sumCounts(m *tcpip.IntegralStatCounterMap) uint64 {
	var n uint64
	if m == nil {
		return 0
	}
	for _, k := range m.Keys() {
		if c, ok := m.Get(k); ok {
			n += c.Value()
		}
	}
	return n
}
