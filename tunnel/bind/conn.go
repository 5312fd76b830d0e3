package bind

import (
	"errors"
	"net/netip"
)

// Endpoint is a UDP peer address. IPv4 endpoints are plain IPv4 (Is4),
// never IPv4-mapped IPv6.
type Endpoint = netip.AddrPort

// Conn is one bound UDP socket moving datagrams in batches.
//
// Concurrency: every method is safe for concurrent use. ReadBatch and
// WriteBatch may run at the same time; concurrent calls of ReadBatch are
// serialised, as are concurrent calls of WriteBatch. The usual layout is
// one reader goroutine and one writer (the tunnel driver).
//
// Close: after Close (which may run during a blocked ReadBatch or
// WriteBatch and wakes it) ReadBatch and WriteBatch return an error
// wrapping net.ErrClosed; datagrams received but not yet returned are
// discarded.
type Conn interface {
	// ReadBatch blocks until at least one datagram has arrived, then
	// fills bufs[i][:sizes[i]] with up to min(len(bufs), BatchSize())
	// datagrams, eps[i] with their sources, and returns their number.
	// sizes and eps must be at least as long as bufs (it panics
	// otherwise); with no bufs it returns 0 at once.
	//
	// Each bufs[i] should be as long as the largest datagram expected, and
	// all of the same length: a datagram longer than the buffer it would
	// land in is dropped and counted in Stats().Dropped, never returned
	// truncated. ReadBatch owns bufs only during the call and keeps no
	// reference to them. Datagrams from one sender keep their order here
	// whenever the network kept it. Errors other than net.ErrClosed come
	// from the kernel and leave the Conn usable.
	ReadBatch(bufs [][]byte, sizes []int, eps []Endpoint) (int, error)

	// WriteBatch sends each of bufs as one datagram to ep, in order. All
	// datagrams of a batch go to the same destination (the tunnel has one
	// peer per socket); it may be longer than BatchSize, and is then sent
	// in chunks. WriteBatch blocks while the socket's send buffer is full
	// and keeps no reference to bufs after it returns.
	//
	// On error, a prefix of bufs may have been sent; the error wraps the
	// system's (errors.Is with syscall errnos works) or ErrAddressFamily
	// or net.ErrClosed.
	WriteBatch(bufs [][]byte, ep Endpoint) error

	// BatchSize is the most datagrams one ReadBatch returns, and the
	// batch length WriteBatch sends per system call. Callers size their
	// buffer sets to it. It never changes.
	BatchSize() int

	// LocalAddr is the bound address (port resolved when 0 was asked).
	LocalAddr() Endpoint

	// Stats returns counters and the current offload state.
	Stats() Stats

	// Close closes the socket and wakes blocked calls. Closing twice
	// returns nil.
	Close() error
}

// WaitNotifier is implemented by a Conn whose ReadBatch can tell its
// caller when it finds no datagram and is about to wait for one. The
// tunnel's driver uses it to know that no further batch is coming soon,
// so that deadlines a coming batch would make it check anyway need a
// timer only then.
type WaitNotifier interface {
	// OnReadWait sets f, which ReadBatch calls on its own goroutine each
	// time it is about to wait for the socket (nil: none). Set it before
	// the first ReadBatch, and before the goroutine that reads starts.
	OnReadWait(f func())
}

// ReadWaiter is implemented by a Conn that can wait for the socket
// before a read. A reader that has not slept since its last ReadBatch
// calls WaitRead before the next: if the last read's system call emptied
// the socket, WaitRead waits there for the next datagram, where ReadBatch
// would first make one more system call only to be told there is none.
// A reader that slept (to let datagrams gather) reads at once instead.
type ReadWaiter interface {
	// WaitRead returns when a ReadBatch may find a datagram: at once
	// unless the last read emptied the socket and left nothing pending.
	// It tells OnReadWait's function before it waits, as ReadBatch does.
	WaitRead() error
}

// ErrAddressFamily means WriteBatch was given a destination the socket
// cannot reach: IPv6 from an IPv4 socket, IPv4 from an IPv6-only one, or an
// invalid address. Listen on "udp" (dual-stack) to reach both families.
var ErrAddressFamily = errors.New("bind: destination address family not usable by this socket")

// Stats is a snapshot of a Conn's counters. Counters only grow.
type Stats struct {
	// GSO and GRO report whether UDP segmentation offload is used for
	// sends now, and whether GRO was enabled on the socket. GSO may turn
	// off during the Conn's life (see the package doc), never on.
	GSO, GRO bool

	// DontFragment reports that the socket sends with DF set and never
	// fragments locally (Linux: IP_PMTUDISC_PROBE, also for IPv6).
	DontFragment bool
	// TooBig counts datagrams the kernel refused as larger than the
	// outgoing device's MTU (EMSGSIZE); each is dropped, and the rest of
	// the batch is still sent. It is lost like any packet on the path:
	// the tunnel's path MTU discovery takes a lost probe as "too big".
	TooBig uint64

	// ReadBuffer and WriteBuffer are SO_RCVBUF and SO_SNDBUF as the kernel
	// reports them after Listen asked for Options' sizes. Linux reports
	// twice the size granted (half is for its bookkeeping) and caps
	// unprivileged requests at net.core.rmem_max / wmem_max. Zero where
	// the platform does not tell.
	ReadBuffer, WriteBuffer int

	// ReadSyscalls and WriteSyscalls count receive and send system calls,
	// including those that found nothing to do (EAGAIN).
	ReadSyscalls, WriteSyscalls uint64

	// DatagramsRead and BytesRead count datagrams returned by ReadBatch
	// (after GRO splitting); DatagramsWritten and BytesWritten count
	// datagrams the kernel accepted from WriteBatch.
	DatagramsRead, BytesRead       uint64
	DatagramsWritten, BytesWritten uint64

	// Coalesced counts received GRO super-datagrams holding more than one
	// datagram; Segmented counts GSO sends carrying more than one.
	Coalesced, Segmented uint64

	// Dropped counts received datagrams discarded because they were longer
	// than the caller's buffer (or truncated by the kernel).
	Dropped uint64
}
