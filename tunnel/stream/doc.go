// Package stream is the per-stream byte state of wanopt's tunnel: send and
// receive buffers, stream- and connection-level flow control with
// auto-tuned receive windows, a connection-wide memory budget, and the fair
// scheduler that picks which stream fills the next packet.
//
// It is sans-IO and single-threaded, like the connection that uses it: no
// goroutines, no locks, no clock. Functions that need time take a
// monotime.Time. The connection serialises every call on a ConnFlow and on
// all streams created with it; a driver adds blocking Read and Write on
// top, waking its goroutines when the connection reports progress.
//
// # Pieces
//
//   - ConnFlow: one per connection. It holds the connection's send credit
//     (the peer's MAX_DATA), its receive window (our MAX_DATA, auto-tuned),
//     the memory Budget and the chunk Pool shared by all its streams.
//   - SendStream: the sending half of a stream. The application writes into
//     a bounded buffer; the connection pops STREAM frames from it
//     (retransmissions first, then new data within both credits), and
//     reports each frame as acked or lost.
//   - RecvStream: the receiving half. The connection hands it STREAM
//     frames in any order; the application reads the bytes in order; the
//     connection asks it when to send MAX_STREAM_DATA.
//   - Scheduler: deficit round-robin over the IDs of streams with data to
//     send, one quantum (about a packet) per turn.
//
// # Flow control and memory
//
// Each receive window starts at Config.InitialStreamWindow and doubles, up
// to Config.MaxStreamWindow, when the application consumes it in less than
// two smoothed RTTs per window (the auto-tuning of quic-go, after Chromium):
// a window that is drained that fast is what limits the throughput. A
// 250 Mbit/s path with 600 ms RTT has a bandwidth-delay product of about
// 19 MB, so the default maximum is 32 MiB.
//
// Memory is bounded twice. Per stream, by the receive window (bytes the peer
// may send that we have not read) and by Config.SendBufferBytes (bytes
// written and not yet acknowledged). Per connection, by the Budget: every
// byte of receive credit granted and not yet read, and every byte held in a
// send buffer, is reserved from it. Only a floor per stream is granted
// regardless of the budget (the initial receive window, which the peer may
// use before any MAX_STREAM_DATA, and Config.MinSendBufferBytes), so that
// every stream can always make progress; the connection bounds the number
// of open streams, which bounds the total beyond the budget. The send
// buffers may be bounded more tightly, together (ConnFlow.SetSendCap: the
// connection holds about two congestion windows ahead of the path, shared
// by the streams the peer's credit lets send; a stream holds at most its
// floor beyond that credit). A stalled reader therefore holds at most its
// current window: its stream gets no new credit, and the others keep
// theirs; on the sending side it holds little beyond the credit it has,
// and no share of the cap.
//
// The connection window (our MAX_DATA) bounds the bytes in flight, not
// those waiting to be read: the credit of a byte is handed back when it
// arrives, as long as the unread bytes and a window in flight stay within
// the Budget plus Config.MaxConnWindow (ConnFlow.release). Counted until
// read, as in QUIC, the bytes of two stalled readers at their largest
// windows took the whole connection window, and every other stream of the
// connection stalled with them.
//
// # Errors
//
// Peer misbehaviour is reported as an error wrapping ErrFlowControl or
// ErrFinalSize (test with errors.Is); CloseCode maps it to the CLOSE code
// the connection sends. Nothing the peer sends makes this package panic.
// Misuse by the caller (a negative length) is a bug and may panic.
package stream
