package tunnel

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/stream"
)

// Defaults for Config.
const (
	// DefaultMaxUDPPayloadBytes keeps IPv4 packets within a 1500-byte MTU.
	DefaultMaxUDPPayloadBytes = 1500 - ipv4UDPHeaderBytes
	// MinUDPPayloadBytes is the smallest MaxUDPPayloadBytes accepted: a
	// handshake initiation (147 bytes) and room for frames.
	MinUDPPayloadBytes = 256
	// DefaultIdleTimeout closes a connection that heard nothing from its
	// peer for this long. It is longer than Linux TCP's default
	// retransmission budget (tcp_retries2 = 15: about 15.4 minutes), so a
	// flow that would have outlived a WAN outage without wanopt outlives it
	// with wanopt (RFC 3135 §4, fate sharing). A restarted peer is noticed
	// long before: REJECT tells a client, a new initiation a server.
	DefaultIdleTimeout = 20 * time.Minute
	// DefaultRekeyAfter is WireGuard's REKEY_AFTER_TIME: a session's keys
	// protect at most two minutes of traffic, so a key stolen from memory
	// later opens little.
	DefaultRekeyAfter = 120 * time.Second
	// DefaultRekeyAfterPackets is the confidentiality limit RFC 9001
	// (section 6.6) sets for AES-GCM: 2^23 packets under one key, applied to
	// ChaCha20-Poly1305 too.
	DefaultRekeyAfterPackets = 1 << 23
	// MaxKeepAliveInterval is the longest default keepalive interval; the
	// default is min(MaxKeepAliveInterval, IdleTimeout/3).
	MaxKeepAliveInterval = 10 * time.Second
	// DefaultHandshakeRetransmit is the first handshake retransmission
	// interval; it doubles per attempt up to MaxHandshakeRetransmit.
	DefaultHandshakeRetransmit = time.Second
	// MaxHandshakeRetransmit bounds the handshake retransmission interval:
	// an initiation (147 bytes) every second finds a returning path within
	// a second, for a few bytes per second while it is down.
	MaxHandshakeRetransmit = time.Second
	// DefaultMaxStreams is the default limit of open streams per direction
	// (opened by us, and opened by the peer).
	DefaultMaxStreams = 4096
	// DefaultInitialStreamWindowBytes is the stream receive window at open
	// on a cold connection when Config.Stream.InitialStreamWindow is 0:
	// 1 MiB, a 250 Mbit/s × 32 ms bandwidth-delay product, so a new flow is
	// not held to the stream package's 256 KiB before auto-tuning. It is a
	// floor granted regardless of the memory budget, so the worst case is
	// MaxStreams MiB. A warm connection grants more (openwindow.go).
	DefaultInitialStreamWindowBytes = 1 << 20
	// DefaultMaxDatagramQueue is how many outgoing and incoming datagrams
	// wait at most; more are dropped. Outgoing ones wait for the pacer, and
	// after an edge was off the CPU what the TUN held for it comes at once.
	// 1,024 is a Linux interface's default queue (txqueuelen 1000): 200 ms
	// of 50 Mbit/s of 1,200-byte datagrams.
	DefaultMaxDatagramQueue = 1024
)

// ipv4UDPHeaderBytes is what each datagram costs on the link beyond its
// payload: 20 bytes of IPv4 header and 8 of UDP.
const ipv4UDPHeaderBytes = 20 + 8

// ipv6UDPHeaderBytes is the same over IPv6: 40 bytes of header and 8 of
// UDP.
const ipv6UDPHeaderBytes = 40 + 8

// MaxUDPPayloadBytesFor is the MaxUDPPayloadBytes that keeps the tunnel's
// packets to or from peer within a 1500-byte MTU: 1,472 for an IPv4 peer
// (also written IPv4-mapped), 1,452 for an IPv6 one, for which the IPv4
// size would make every full packet too big to send (EMSGSIZE). For a
// socket on every address ([::]) it is the IPv6 size, which fits both;
// the driver still receives datagrams up to the IPv4 size.
func MaxUDPPayloadBytesFor(peer netip.Addr) int {
	return MaxUDPPayloadBytesForMTU(peer, 1500)
}

// MaxUDPPayloadBytesForMTU is MaxUDPPayloadBytesFor for a path of mtu
// bytes (IP packet) instead of 1500: the ceiling of the tunnel's path MTU
// search when the operator knows the WAN's MTU (wanopt run --tunnel-mtu).
func MaxUDPPayloadBytesForMTU(peer netip.Addr, mtu int) int {
	if peer.Is6() && !peer.Is4In6() {
		return mtu - ipv6UDPHeaderBytes
	}
	return mtu - ipv4UDPHeaderBytes
}

// CongestionControl selects the congestion controller.
type CongestionControl uint8

// Congestion controllers.
const (
	// CCBBR is BBR (the default): paced at the path's measured bandwidth.
	CCBBR CongestionControl = iota
	// CCCubic is CUBIC, for comparison.
	CCCubic
	// CCFixed sends at Config.FixedRateBps, for dedicated links.
	CCFixed
)

// String returns "bbr", "cubic" or "fixed".
func (c CongestionControl) String() string {
	switch c {
	case CCBBR:
		return "bbr"
	case CCCubic:
		return "cubic"
	case CCFixed:
		return "fixed"
	}
	return fmt.Sprintf("CongestionControl(%d)", uint8(c))
}

// Config configures a Conn. Zero fields take the defaults noted.
type Config struct {
	// PrivateKey is this edge's static key. Required.
	PrivateKey crypt.PrivateKey
	// PeerPublicKey is the peer's static key. Required for a client; for a
	// server it is the only key allowed when AllowPeer is nil.
	PeerPublicKey crypt.PublicKey
	// AllowPeer is the server's policy: it reports whether a peer key may
	// connect. Nil allows exactly PeerPublicKey.
	AllowPeer func(crypt.PublicKey) bool
	// HandshakeTimestamp orders handshakes from one client key; the driver
	// passes wall-clock Unix nanoseconds at the Conn's creation so that it
	// increases across restarts (see crypt.Timestamp). Each initiation
	// carries it plus the time since the Conn was created, so every one is
	// fresh. Tests pass any constant. Required for a client (nonzero).
	HandshakeTimestamp crypt.Timestamp
	// RekeyAfter (client) is how long a session's keys last: then the
	// client handshakes again inside the connection and both sides switch
	// to the new keys without disturbing streams (DefaultRekeyAfter if 0;
	// negative: never, for tests). RekeyAfterPackets likewise bounds the
	// packets sealed under one key (DefaultRekeyAfterPackets if 0).
	RekeyAfter        time.Duration
	RekeyAfterPackets uint64
	// Resume (client) tells the server that this Conn's client still holds
	// an established session with it (crypt.Initiator.SetResume): the
	// handshake after a REJECT, which a live server (the REJECT was forged)
	// declines and a restarted one answers.
	Resume bool
	// Timestamps (server) is the memory of the newest initiation accepted
	// from each client key. A server that passes one memory to every Conn
	// (the edge keeps one for its process's life) never answers an
	// initiation twice; nil: each Conn remembers only its own.
	Timestamps *crypt.Timestamps

	// MaxUDPPayloadBytes is the largest datagram the connection emits
	// (DefaultMaxUDPPayloadBytes if 0; at least MinUDPPayloadBytes): the
	// ceiling of its path MTU search. Data packets start at
	// BasePLPMTUBytes (or this, if smaller) and grow to the largest size
	// probes confirm the path carries (see pmtu.go).
	MaxUDPPayloadBytes int
	// Congestion selects the controller (CCBBR by default).
	Congestion CongestionControl
	// FixedRateBps is the sending rate of CCFixed, in bits per second.
	FixedRateBps uint64
	// InitialBandwidthBps, if set, is the WAN's bottleneck rate as the
	// operator knows it, in bits of IP packets per second: BBR starts from
	// it, less the IP and UDP headers, instead of probing up from ten
	// packets (cc.BBRConfig.InitialBwBps). 0: probe.
	InitialBandwidthBps uint64
	// IdleTimeout closes the connection after this long without an
	// authenticated packet from the peer; it also bounds the handshake
	// (DefaultIdleTimeout if 0).
	IdleTimeout time.Duration
	// KeepAliveInterval: when no ack-eliciting packet was sent for this
	// long, a PING is sent, so the peer does not time out and NAT state
	// stays alive. 0 means min(MaxKeepAliveInterval, IdleTimeout/3);
	// negative disables.
	KeepAliveInterval time.Duration
	// MaxStreams bounds the open streams per direction
	// (DefaultMaxStreams if 0).
	MaxStreams int
	// MaxDatagramQueue bounds queued datagrams each way
	// (DefaultMaxDatagramQueue if 0).
	MaxDatagramQueue int
	// Stream sizes the stream buffers, flow-control windows and the memory
	// budget. Both edges must use the same InitialStreamWindow and
	// InitialConnWindow.
	Stream stream.Config

	// Rand supplies handshake ephemeral keys, session indexes and the
	// controller's randomness (crypto/rand.Reader if nil).
	Rand io.Reader
	// Logger receives connection-level events (never keys); nil discards.
	Logger *slog.Logger
}

// withDefaults returns c with its zero fields set, or an error wrapping
// ErrConfig.
func (c Config) withDefaults(client bool) (Config, error) {
	if c.PrivateKey.IsZero() {
		return c, fmt.Errorf("%w: PrivateKey is not set", ErrConfig)
	}
	if client && c.PeerPublicKey.IsZero() {
		return c, fmt.Errorf("%w: a client needs PeerPublicKey", ErrConfig)
	}
	if client && c.HandshakeTimestamp == 0 {
		return c, fmt.Errorf("%w: a client needs HandshakeTimestamp (wall-clock Unix nanoseconds)", ErrConfig)
	}
	if !client && c.AllowPeer == nil {
		if c.PeerPublicKey.IsZero() {
			return c, fmt.Errorf("%w: a server needs AllowPeer or PeerPublicKey", ErrConfig)
		}
		peer := c.PeerPublicKey
		c.AllowPeer = func(k crypt.PublicKey) bool { return k == peer }
	}
	if c.MaxUDPPayloadBytes == 0 {
		c.MaxUDPPayloadBytes = DefaultMaxUDPPayloadBytes
	}
	if c.RekeyAfter == 0 {
		c.RekeyAfter = DefaultRekeyAfter
	}
	if c.RekeyAfterPackets == 0 {
		c.RekeyAfterPackets = DefaultRekeyAfterPackets
	}
	if c.MaxUDPPayloadBytes < MinUDPPayloadBytes || c.MaxUDPPayloadBytes > 65527 {
		return c, fmt.Errorf("%w: MaxUDPPayloadBytes %d outside [%d, 65527]", ErrConfig, c.MaxUDPPayloadBytes, MinUDPPayloadBytes)
	}
	switch c.Congestion {
	case CCBBR, CCCubic:
	case CCFixed:
		if c.FixedRateBps == 0 {
			return c, fmt.Errorf("%w: CCFixed needs FixedRateBps", ErrConfig)
		}
	default:
		return c, fmt.Errorf("%w: unknown congestion controller %v", ErrConfig, c.Congestion)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.IdleTimeout < 0 {
		return c, fmt.Errorf("%w: negative IdleTimeout", ErrConfig)
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = min(MaxKeepAliveInterval, c.IdleTimeout/3)
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxDatagramQueue <= 0 {
		c.MaxDatagramQueue = DefaultMaxDatagramQueue
	}
	if c.Stream.InitialStreamWindow == 0 {
		c.Stream.InitialStreamWindow = DefaultInitialStreamWindowBytes
	}
	if err := c.Stream.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// peerInitialConnWindow is the connection credit the peer grants before
// its first MAX_DATA: both ends use the same stream.Config.
func peerInitialConnWindow(c stream.Config) uint64 {
	if c.InitialConnWindow == 0 {
		return stream.DefaultInitialConnWindow
	}
	return c.InitialConnWindow
}

// peerInitialStreamWindow is the stream credit the peer grants before its
// first MAX_STREAM_DATA.
func peerInitialStreamWindow(c stream.Config) uint64 {
	if c.InitialStreamWindow == 0 {
		return stream.DefaultInitialStreamWindow
	}
	return c.InitialStreamWindow
}
