package driver

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// Defaults for Config.
const (
	// DefaultAcceptBacklog is how many streams opened by the peer wait
	// for AcceptStream before more are refused (wire.OpenResourceLimit).
	DefaultAcceptBacklog = 128
	// DefaultRxBatches is how many receive batches (each BatchSize
	// datagrams) the reader goroutine may fill ahead of the driver: 8 × 64
	// × 1472 bytes = 750 KB, 6 ms at 1 Gbit/s.
	DefaultRxBatches = 8
	// DefaultRxHold: without a hold every datagram of a bulk transfer costs
	// the reader and the driver a wake-up. 2 ms gathers about 42 datagrams
	// at 250 Mbit/s and adds at most 2 ms to a packet's trip; 1 ms costs
	// the edges a tenth to a quarter more CPU per byte
	// (`wanbench cisco --rtt 0ms --edge-cpu 0.25`). On a longer path the
	// hold grows with its RTT (see rxHoldCap).
	DefaultRxHold = 2 * time.Millisecond
)

// Config configures Dial and Listen.
type Config struct {
	// Tunnel configures the connection: this edge's PrivateKey (required),
	// the peer's PeerPublicKey (Dial: the server's key, required; Listen:
	// the one client allowed unless Tunnel.AllowPeer is set), congestion
	// control and limits. Dial sets HandshakeTimestamp from the wall clock
	// when it is 0. Tunnel.Logger defaults to Logger. Received datagrams
	// longer than this edge's MaxUDPPayloadBytes, or than
	// tunnel.DefaultMaxUDPPayloadBytes if that is larger, are dropped: an
	// edge sized for an IPv6 peer still hears one sized for IPv4.
	Tunnel tunnel.Config

	// RemoteAddr is the server's UDP address (Dial only; required).
	RemoteAddr netip.AddrPort

	// Network is "udp", "udp4" or "udp6" for the socket opened when Bind
	// is nil ("udp" if empty: dual-stack when LocalAddr is unspecified).
	Network string
	// LocalAddr is the address the socket binds to. Zero means any address
	// and a free port (Tunnel.LocalAddr tells which).
	LocalAddr netip.AddrPort
	// BindOptions configure the socket (batch size, buffers, offloads).
	BindOptions bind.Options
	// Bind, when set, is used instead of opening a socket (tests pass a
	// bindtest pair; LocalAddr, Network and BindOptions are then ignored).
	// The Tunnel owns it from the call on and closes it, also on error.
	Bind bind.Conn

	// AcceptBacklog bounds the streams opened by the peer that wait for
	// AcceptStream; beyond it they are refused with
	// wire.OpenResourceLimit (DefaultAcceptBacklog if 0).
	AcceptBacklog int
	// RxBatches is how many receive batches the reader fills ahead of the
	// driver; when all are full it drops what it reads (DefaultRxBatches if
	// 0).
	RxBatches int

	// RxHold is how long the reader waits before its next read while
	// datagrams keep arriving a few at a time (see rxHolder), trading up to
	// that much delay for several datagrams per wake-up (DefaultRxHold if 0;
	// negative: never hold). On a long path it may grow to a 32nd of the
	// RTT, at most 2 × RxHold.
	RxHold time.Duration

	// TimerOnly makes the driver wait for every deadline with its Go timer,
	// also the sub-millisecond pacing waits it otherwise hands to the
	// sleeper on Linux (see the package doc).
	TimerOnly bool

	// OnDatagram, if set, receives every datagram the peer sent with
	// SendDatagram, on the driver goroutine: p is valid only during the
	// call, so the callee copies what it keeps, and it must not block
	// (every stream of the tunnel waits meanwhile); hand the work to a
	// goroutine of your own through a bounded queue. Without it the
	// peer's datagrams are counted (Stats.DatagramsUnclaimed) and dropped.
	OnDatagram func(p []byte)
	// DatagramQueue bounds the datagrams SendDatagram queues for the
	// driver goroutine; more are refused (DefaultDatagramQueue if 0).
	DatagramQueue int

	// OnHandshakeSent (Dial), if set, is told the count of handshake
	// initiations the dial has sent, each time one goes, until the
	// handshake completes: the application shows the attempts of a dial
	// nobody answers. It runs on the driver goroutine and must not block.
	OnHandshakeSent func(sent uint64)
	// Refusals (Listen), if set, records the initiations the server
	// refuses (bad mac1, rate limited, not decrypting, unknown key,
	// replayed), with their source and, where the handshake reveals it,
	// the initiator's key. Pass one Refusals to every Listen of a server,
	// so its counts outlive each tunnel.
	Refusals *Refusals

	// NoGate (server) skips the driver's handshake gate: the socket is a
	// Hub's, which gates initiations before they reach the tunnel.
	NoGate bool

	// Logger receives the driver's events (never keys); nil discards.
	Logger *slog.Logger
}

// resolve validates c and fills in defaults.
func (c Config) resolve(client bool) (Config, error) {
	if c.Tunnel.PrivateKey.IsZero() {
		return c, fmt.Errorf("%w: Tunnel.PrivateKey is not set (generate one with crypt.GenerateKey)", ErrConfig)
	}
	if client {
		if c.Tunnel.PeerPublicKey.IsZero() {
			return c, fmt.Errorf("%w: Dial needs Tunnel.PeerPublicKey, the server's public key", ErrConfig)
		}
		if !c.RemoteAddr.IsValid() || c.RemoteAddr.Port() == 0 {
			return c, fmt.Errorf("%w: Dial needs RemoteAddr, the server's UDP address and port (have %v)", ErrConfig, c.RemoteAddr)
		}
		if c.Tunnel.HandshakeTimestamp == 0 {
			c.Tunnel.HandshakeTimestamp = crypt.Timestamp(time.Now().UnixNano())
		}
	} else if c.Tunnel.AllowPeer == nil && c.Tunnel.PeerPublicKey.IsZero() {
		return c, fmt.Errorf("%w: Listen needs Tunnel.PeerPublicKey or Tunnel.AllowPeer to know which client may connect", ErrConfig)
	}
	if c.Network == "" {
		c.Network = "udp"
	}
	if c.AcceptBacklog <= 0 {
		c.AcceptBacklog = DefaultAcceptBacklog
	}
	if c.RxBatches <= 0 {
		c.RxBatches = DefaultRxBatches
	}
	if c.DatagramQueue <= 0 {
		c.DatagramQueue = DefaultDatagramQueue
	}
	if c.RxHold == 0 {
		c.RxHold = DefaultRxHold
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Tunnel.Logger == nil {
		c.Tunnel.Logger = c.Logger
	}
	if c.Tunnel.MaxUDPPayloadBytes == 0 {
		c.Tunnel.MaxUDPPayloadBytes = tunnel.DefaultMaxUDPPayloadBytes
	}
	return c, nil
}
