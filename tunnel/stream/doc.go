// Package stream is the per-stream byte state of wanopt's tunnel: send and
// receive buffers, stream- and connection-level flow control with
// auto-tuned receive windows, a connection-wide memory budget, and the fair
// scheduler that picks which stream fills the next packet.
//
// It is sans-IO and single-threaded, like the connection that uses it: no
// goroutines, locks or clock; the connection serialises every call on a
// ConnFlow and its streams, and a driver adds blocking Read and Write.
//
// # Pieces
//
//   - ConnFlow: per connection, the send credit (the peer's MAX_DATA),
//     the auto-tuned receive window (our MAX_DATA), the memory Budget and
//     the chunk Pool shared by its streams.
//   - SendStream: a bounded send buffer the connection pops STREAM frames
//     from (retransmissions first, then new data within both credits).
//   - RecvStream: reassembles STREAM frames in any order for in-order
//     reads, and says when to send MAX_STREAM_DATA.
//   - Scheduler: deficit round-robin over the streams with data to send,
//     one quantum (about a packet) per turn.
//
// # Flow control and memory
//
// Each receive window starts at Config.InitialStreamWindow and doubles, up
// to Config.MaxStreamWindow, when the application consumes it in less
// than two smoothed RTTs per window (quic-go's auto-tuning, after
// Chromium): a window drained that fast is what limits the throughput.
// The default maximum, 32 MiB, covers 250 Mbit/s at 600 ms (about 19 MB).
//
// Memory is bounded per stream, by the receive window and by
// Config.SendBufferBytes, and per connection, by the Budget: every byte of
// receive credit granted and not yet read, and every byte held in a send
// buffer, is reserved from it. Only a floor per stream is granted
// regardless of the budget (the initial receive window and
// Config.MinSendBufferBytes), so every stream can make progress; the
// connection bounds the number of streams, which bounds the total. The
// send buffers may be bounded more tightly, together (ConnFlow.SetSendCap:
// about two congestion windows, shared by the streams the peer's credit
// lets send). A stalled reader holds at most its current window, and on
// the sending side little beyond its credit and no share of the cap.
//
// The connection window (our MAX_DATA) bounds the bytes in flight, not
// those waiting to be read: a byte's credit is handed back when it
// arrives, as long as the unread bytes and a window in flight stay within
// the Budget plus Config.MaxConnWindow (ConnFlow.release). Counted until
// read, as in QUIC, two stalled readers would take the whole window and
// stall every other stream.
//
// # Errors
//
// Peer misbehaviour is reported as an error wrapping ErrFlowControl or
// ErrFinalSize (test with errors.Is); CloseCode maps it to the CLOSE code
// the connection sends. Nothing the peer sends makes this package panic.
// Misuse by the caller (a negative length) is a bug and may panic.
package stream
