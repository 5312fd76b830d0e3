// Package bind is the tunnel driver's UDP layer: one bound UDP socket that
// receives and sends datagrams in batches, with few system calls per
// datagram. It is modelled on wireguard-go's conn.Bind.
//
// # Batches
//
// A Conn moves up to BatchSize datagrams per call: on Linux one recvmmsg
// or sendmmsg. The default, 64, is the most segments the kernel coalesces
// into one UDP GSO send or GRO receive, so a full batch is one or two
// super-datagrams. Batching saves system calls; the offloads save the
// kernel's per-datagram work, and most of the gain is theirs
// (BenchmarkLoopback).
//
// # Offloads (Linux)
//
// UDP GSO: WriteBatch hands the kernel runs of consecutive equal-sized
// datagrams (the last may be shorter) as one message of up to 64 segments
// and 65507 bytes, one iovec per caller buffer, so nothing is copied.
//
// UDP GRO: the kernel may hand ReadBatch a super-datagram holding many
// datagrams of one sender. Each message is received into the caller's
// buffer and, past its end, a 64 KiB ring slot, so a datagram that was
// not coalesced (all of them behind a TUN device) needs no copy. Once a
// receive brings a super-datagram, ReadBatch copies datagrams out of the
// ring; those that do not fit the caller's batch wait there for the next
// ReadBatch, without a system call. Only the ring bytes the kernel writes
// become resident.
//
// Both are probed at Listen and on where the kernel has them. If a GSO
// send fails with EIO (the device cannot checksum: IPsec, some virtual
// NICs) or EINVAL, the Conn turns GSO off for good, resends the unsent
// datagrams one per message, and logs it once.
//
// # Waiting (Linux)
//
// The system calls are raw ones on the non-blocking socket: a call
// through Go's scheduler sets the runtime's monitor thread polling every
// 20 µs. A call that finds nothing to read, or no room, waits in Go's
// poller through an epoll instance of the Conn's own, armed once per wait
// (oneshot), so datagrams that arrive while nobody reads wake nothing.
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
