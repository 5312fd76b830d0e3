package exp

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

type tunnelEvent = tunnel.Event

const eventEstablished = tunnel.EventEstablished

// simConn adapts a tunnel.Conn to a netsim endpoint and runs the
// application's handler after every input, as a driver would.
type simConn struct {
	c       *tunnel.Conn
	onEvent func(now monotime.Time, ev tunnel.Event)
}

func (e *simConn) HandleDatagram(now monotime.Time, b []byte) {
	e.c.HandleDatagram(now, b)
	e.drain(now)
}
func (e *simConn) HandleTimeout(now monotime.Time) { e.c.HandleTimeout(now); e.drain(now) }
func (e *simConn) PollTransmit(now monotime.Time, buf []byte) int {
	return e.c.PollTransmit(now, buf)
}
func (e *simConn) NextTimeout() monotime.Time { return e.c.NextTimeout() }

func (e *simConn) drain(now monotime.Time) {
	for {
		ev, ok := e.c.PollEvent()
		if !ok {
			return
		}
		if e.onEvent != nil {
			e.onEvent(now, ev)
		}
	}
}

func congestionByName(name string) (tunnel.CongestionControl, error) {
	switch strings.ToLower(name) {
	case "", "bbr":
		return tunnel.CCBBR, nil
	case "cubic":
		return tunnel.CCCubic, nil
	case "fixed":
		return tunnel.CCFixed, nil
	}
	return 0, fmt.Errorf("tunnel congestion control %q: want bbr, cubic or fixed", name)
}

// bulk is the applications at both ends: the client opens streams and
// writes n bytes on each; the server accepts and reads.
type bulk struct {
	cli, srv  *tunnel.Conn
	perStream int
	chunk     []byte
	written   map[uint64]int
	closed    map[uint64]bool
	read      map[uint64]int
	fins      int
	streams   int
	readBuf   []byte
	firstOpen monotime.Time // first OPEN_RESULT ok: the transfer starts
	lastByte  monotime.Time
	received  int64
	failed    error
}

func newBulk(cli, srv *tunnel.Conn, streams, perStream int) *bulk {
	return &bulk{cli: cli, srv: srv, perStream: perStream, streams: streams,
		chunk: make([]byte, 64<<10), readBuf: make([]byte, 64<<10),
		written: map[uint64]int{}, closed: map[uint64]bool{}, read: map[uint64]int{}}
}

func (b *bulk) done() bool { return b.fins == b.streams || b.failed != nil }

func (b *bulk) open(now monotime.Time) {
	for range b.streams {
		if _, err := b.cli.OpenStream(now, netip.MustParseAddrPort("198.18.1.2:40000"), netip.MustParseAddrPort("198.18.2.2:5001")); err != nil {
			b.failed = err
		}
	}
}

func (b *bulk) pump(id uint64) {
	for !b.closed[id] {
		left := b.perStream - b.written[id]
		if left == 0 {
			if b.cli.StreamCloseWrite(id) == nil {
				b.closed[id] = true
			}
			return
		}
		n, err := b.cli.StreamWrite(id, b.chunk[:min(left, len(b.chunk))])
		if err != nil || n == 0 {
			return
		}
		b.written[id] += n
	}
}

func (b *bulk) onClient(now monotime.Time, ev tunnel.Event) {
	switch ev.Kind {
	case tunnel.EventOpenResult:
		if ev.OpenCode != wire.OpenOK {
			b.failed = fmt.Errorf("stream %d refused: %v", ev.StreamID, ev.OpenCode)
			return
		}
		if b.firstOpen == 0 {
			b.firstOpen = now
		}
		b.pump(ev.StreamID)
	case tunnel.EventStreamWritable:
		b.pump(ev.StreamID)
	case tunnel.EventClosed:
		b.failed = fmt.Errorf("client connection closed: %v", ev.Err)
	}
}

func (b *bulk) onServer(now monotime.Time, ev tunnel.Event) {
	switch ev.Kind {
	case tunnel.EventStreamOpened:
		if err := b.srv.AcceptStream(ev.StreamID); err != nil {
			b.failed = err
		}
	case tunnel.EventStreamReadable:
		for {
			n, fin, err := b.srv.StreamRead(ev.StreamID, b.readBuf)
			if err != nil {
				return
			}
			b.read[ev.StreamID] += n
			b.received += int64(n)
			if n > 0 {
				b.lastByte = now
			}
			if fin {
				if b.read[ev.StreamID] != b.perStream {
					b.failed = fmt.Errorf("stream %d: received %d bytes, want %d", ev.StreamID, b.read[ev.StreamID], b.perStream)
				}
				b.fins++
				return
			}
			if n < len(b.readBuf) {
				return
			}
		}
	case tunnel.EventClosed:
		b.failed = fmt.Errorf("server connection closed: %v", ev.Err)
	}
}

// tunnelPair is a client and a server Conn joined by one simulated flow.
type tunnelPair struct {
	cli, srv *tunnel.Conn
	ce, se   *simConn
	flow     netsim.FlowID
}

// newTunnelPair makes a client and server with keys and randomness derived
// from the seed and salt, and adds them to sim as a flow over fwd and rev.
func newTunnelPair(sim *netsim.Sim, fwd, rev *netsim.Link, o SimOptions, cong tunnel.CongestionControl, salt uint64) (*tunnelPair, error) {
	keys := seed.ChaCha8(o.Seed ^ (0x6b6579 + salt))
	ck, _ := crypt.GenerateKey(keys)
	sk, _ := crypt.GenerateKey(keys)
	cliCfg := tunnel.Config{PrivateKey: ck, PeerPublicKey: sk.PublicKey(), HandshakeTimestamp: 1,
		Congestion: cong, FixedRateBps: uint64(o.RateBps), Rand: seed.ChaCha8(o.Seed ^ (0xc1 + salt))}
	srvCfg := tunnel.Config{PrivateKey: sk, PeerPublicKey: ck.PublicKey(),
		Congestion: cong, FixedRateBps: uint64(o.RateBps), Rand: seed.ChaCha8(o.Seed ^ (0x5e + salt))}
	if o.WANRateHint {
		cliCfg.InitialBandwidthBps, srvCfg.InitialBandwidthBps = uint64(o.RateBps), uint64(o.RateBps)
	}
	cli, err := tunnel.NewClientConn(cliCfg, sim.Now())
	if err != nil {
		return nil, err
	}
	srv, err := tunnel.NewServerConn(srvCfg, sim.Now())
	if err != nil {
		return nil, err
	}
	tp := &tunnelPair{cli: cli, srv: srv, ce: &simConn{c: cli}, se: &simConn{c: srv}}
	tp.flow = sim.AddFlow(tp.ce, tp.se, fwd, rev, netsim.FlowOptions{})
	return tp, nil
}

// SimTunnel runs the scenario through wanopt's tunnel: one connection carrying
// Streams streams, measured after a warm-up of 20 BDPs unless Cold.
func SimTunnel(o SimOptions) (SimResult, error) {
	o.defaults()
	ccName := strings.ToLower(o.CC)
	if ccName == "" {
		ccName = "bbr"
	}
	cong, err := congestionByName(ccName)
	if err != nil {
		return SimResult{}, err
	}
	if err := o.LinkImpairments.Validate(); err != nil {
		return SimResult{}, fmt.Errorf("link impairments: %w", err)
	}
	cpu0 := cpuTime()
	sim := netsim.New(o.Seed)
	fwd, rev := dumbbell(sim, o, 28) // IPv4 + UDP headers count on the wire
	tp, err := newTunnelPair(sim, fwd, rev, o, cong, 0)
	if err != nil {
		return SimResult{}, err
	}
	cli, srv, ce, se, flow := tp.cli, tp.srv, tp.ce, tp.se, tp.flow
	deadline := sim.Now().Add(o.Limit)
	if err := sim.RunUntil(cli.Established, deadline); err != nil {
		return SimResult{}, fmt.Errorf("handshake: %w", err)
	}
	run := func(b *bulk) error {
		ce.onEvent, se.onEvent = b.onClient, b.onServer
		b.open(sim.Now())
		sim.Wake(flow)
		err := sim.RunUntil(b.done, deadline)
		if b.failed != nil {
			return b.failed
		}
		return err
	}
	if !o.Cold {
		bdp := int(float64(o.RateBps) / 8 * o.RTT.Seconds())
		if err := run(newBulk(cli, srv, 1, max(20*bdp, 1<<20))); err != nil {
			return SimResult{}, fmt.Errorf("warm-up transfer: %w", err)
		}
		sim.RunFor(500 * time.Millisecond) // a pause between transfers
	}
	before := cli.Stats()
	if o.Cold {
		startupReset(sim, fwd, o.RTT)
	} else {
		fwd.ResetQueueDelay()
	}
	b := newBulk(cli, srv, o.Streams, int(o.BytesPerStream))
	start := sim.Now() // the streams open now: the twin of the iperf client's start
	outage := trackOutage(sim, o, []*netsim.Link{fwd, rev}, func() int64 { return b.received })
	err = run(b)
	after := cli.Stats()
	scenario := "wanopt tunnel (warm)"
	if o.Cold {
		scenario = "wanopt tunnel (cold)"
	}
	res := SimResult{Scenario: scenario, CC: ccName, Complete: b.fins == b.streams}
	el := b.lastByte.Sub(b.firstOpen)
	if el > 0 {
		res.Seconds = el.Seconds()
		res.GoodputMbps = float64(b.received) * 8 / el.Seconds() / 1e6
		res.LinkRatio = res.GoodputMbps * 1e6 / float64(o.RateBps)
	}
	if sent := after.StreamBytesSent - before.StreamBytesSent; sent > 0 {
		res.RetransPct = float64(after.StreamBytesRetransmitted-before.StreamBytesRetransmitted) / float64(sent) * 100
	}
	res.QueueP95Ms = ms(fwd.QueueDelay().P95)
	res.BwEstimateMbps = float64(after.BandwidthBps) / 1e6
	res.ProbeRTTs = after.BBR.ProbeRTTCount - before.BBR.ProbeRTTCount
	res.CwndBytes = after.CongestionWindow
	if b.lastByte != 0 {
		outage.fill(&res, b.lastByte.Sub(start))
	}
	res.CPUSeconds = cpuTime() - cpu0
	return res, err
}
