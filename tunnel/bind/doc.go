// Package bind is the tunnel driver's UDP layer: one bound UDP socket that
// receives and sends datagrams in batches, with few system calls per
// datagram. It is modelled on wireguard-go's conn.Bind.
//
// # Batches
//
// A Conn moves up to BatchSize datagrams per call. On Linux ReadBatch is one
// recvmmsg and WriteBatch one sendmmsg per batch. The default batch is 64
// (DefaultBatchSize): it equals the most segments the kernel coalesces into
// one UDP GSO send or GRO receive (UDP_MAX_SEGMENTS, UDP_GRO_CNT_MAX), so a
// full batch of tunnel datagrams is one or two super-datagrams; at 1472
// bytes it is 94 KB, one system call per 0.75 ms at 1 Gbit/s, which already
// makes the per-call cost a few percent of the per-byte cost. Larger batches
// buy little and make every receive hold more buffer memory.
//
// Batching alone saves system calls, not the kernel's per-datagram work;
// the offloads save that, and most of the gain is theirs. BenchmarkLoopback
// compares one datagram per call, plain batches and batches with GSO and
// GRO (its comment records the figures last measured).
//
// # Offloads (Linux)
//
// UDP GSO (the UDP_SEGMENT control message): WriteBatch hands the kernel
// runs of consecutive equal-sized datagrams (the last of a run may be
// shorter) as one message of up to 64 segments and 65507 bytes, which the
// kernel (or the NIC) cuts back into datagrams. The run is described by one
// iovec per caller buffer, so nothing is copied in user space.
//
// UDP GRO (the UDP_GRO socket option): the kernel may hand ReadBatch a
// super-datagram holding many datagrams of one sender, with their size in a
// control message. Each message is received into the caller's buffer and,
// past its end, an internal ring slot of 64 KiB: a datagram that was not
// coalesced (all of them where nothing coalesces, as behind a TUN device)
// is returned where it landed, without a copy. From the first
// super-datagram of a receive on, ReadBatch copies the datagrams out of
// the ring one per caller buffer; those that do not fit in the caller's
// batch stay in the ring and are returned first by the next ReadBatch,
// without a system call. The ring is min(BatchSize, 64) × 73 KiB of
// virtual memory (4.6 MiB by default), of which only the bytes the kernel
// writes become resident. Without GRO, ReadBatch receives straight into
// the caller's buffers.
//
// Both are probed when the socket is opened and are on by default where
// the kernel has them. If a GSO send fails with EIO (the route's device
// cannot checksum: IPsec, some virtual NICs) or EINVAL (a segment above the
// route's MTU, checksums disabled), the Conn turns GSO off for good, resends
// the unsent datagrams one per message, and logs it once.
//
// # Waiting (Linux)
//
// The system calls are raw ones on the non-blocking socket, made without
// telling Go's scheduler (each call through it wakes the runtime's monitor
// thread, which then polls every 20 µs). A call that finds nothing to
// read, or no room, waits in Go's poller through an epoll instance of the
// Conn's own, armed for one event per wait (see oneshot): a socket in Go's
// own poller would wake the process for every datagram that arrives, also
// while the driver's reader holds its next read on purpose.
//
// # Addresses
//
// Endpoints are netip.AddrPort values. IPv4 addresses are always plain
// (Is4), also on a dual-stack socket (network "udp" bound to [::]), which
// maps them to ::ffff:a.b.c.d on the wire and back with Unmap.
//
// # Other platforms
//
// Elsewhere Listen returns a plain Conn over net.UDPConn: one datagram per
// system call, BatchSize 1, no offloads, the same contract except that a
// datagram longer than the caller's buffer may arrive truncated. Building
// with the tag bindfallback selects it on Linux too, to test it there.
//
// Package bindtest offers in-memory Conn pairs for tests of the driver.
package bind
