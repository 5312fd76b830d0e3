package bind

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
)

const (
	// DefaultBatchSize is BatchSize when Options leave it 0 (see the
	// package doc for why 64).
	DefaultBatchSize = 64

	// MaxBatchSize is the largest BatchSize: the kernel handles at most
	// 1024 (UIO_MAXIOV) messages per recvmmsg or sendmmsg.
	MaxBatchSize = 1024

	// DefaultSocketBuffer is the SO_RCVBUF and SO_SNDBUF size asked for
	// when Options leave it 0: 4 MiB absorbs 33 ms of a stalled reader at
	// 1 Gbit/s, a paced sender's bursts and a GC pause.
	DefaultSocketBuffer = 4 << 20
)

// Options configure Listen. The zero value gives the defaults: batches of
// 64, 4 MiB socket buffers, GSO and GRO on where supported, no logging.
type Options struct {
	// BatchSize is the most datagrams per ReadBatch and per send system
	// call, 1 to MaxBatchSize; 0 means DefaultBatchSize.
	BatchSize int

	// ReadBuffer and WriteBuffer are the socket buffer sizes in bytes to
	// ask for (SO_RCVBUFFORCE / SO_SNDBUFFORCE when the process has
	// CAP_NET_ADMIN, else SO_RCVBUF / SO_SNDBUF, which the kernel caps at
	// net.core.rmem_max / wmem_max). 0 means DefaultSocketBuffer; a
	// negative value leaves the kernel's default. Stats reports what was
	// granted.
	ReadBuffer, WriteBuffer int

	// DisableGSO and DisableGRO turn the offloads off even where the
	// kernel has them (for comparison, or to work around a broken NIC).
	DisableGSO, DisableGRO bool

	// Logger receives one line at Listen (offloads, buffer sizes, with a
	// warning when the kernel granted less than asked) and one when GSO
	// turns itself off. Nil means no logging.
	Logger *slog.Logger
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.BatchSize == 0:
		o.BatchSize = DefaultBatchSize
	case o.BatchSize < 0 || o.BatchSize > MaxBatchSize:
		return o, fmt.Errorf("bind: batch size %d out of range: use 1 to %d, or 0 for the default %d",
			o.BatchSize, MaxBatchSize, DefaultBatchSize)
	}
	if o.ReadBuffer == 0 {
		o.ReadBuffer = DefaultSocketBuffer
	}
	if o.WriteBuffer == 0 {
		o.WriteBuffer = DefaultSocketBuffer
	}
	return o, nil
}

// Listen opens a UDP socket bound to laddr and returns it as a Conn.
// network is "udp4", "udp6" or "udp"; "udp" with an unspecified or zero
// laddr gives a dual-stack socket that reaches IPv4 and IPv6 peers. A zero
// port picks a free one (see LocalAddr).
func Listen(network string, laddr netip.AddrPort, opts Options) (Conn, error) {
	switch network {
	case "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("bind: listen on network %q: use \"udp\", \"udp4\" or \"udp6\"", network)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var ua *net.UDPAddr
	if laddr.IsValid() {
		ua = net.UDPAddrFromAddrPort(laddr)
	} else if laddr.Port() != 0 {
		ua = &net.UDPAddr{Port: int(laddr.Port())}
	}
	uc, err := net.ListenUDP(network, ua)
	if err != nil {
		return nil, fmt.Errorf("bind: listen on %s %v: %w", network, laddr, err)
	}
	c, err := newConn(uc, network, o)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("bind: set up %s socket on %v: %w", network, uc.LocalAddr(), err)
	}
	return c, nil
}
