// Package driver runs a sans-IO tunnel.Conn over a UDP socket (a
// bind.Conn) and gives the rest of the program streams: Dial and Listen
// return a Tunnel once the handshake is done; OpenStream and AcceptStream
// give *Stream values that are io.Reader, io.Writer and half-closable,
// with net.Conn deadlines. The bridge between the netstack and the tunnel
// uses it: the near edge calls OpenStream for an intercepted SYN and
// answers the SYN only when it returns; the far edge calls AcceptStream,
// connects to Dst, then Accept or Reject with the outcome.
//
// # Goroutines
//
// A Tunnel runs two goroutines, three on Linux, all started by Dial or
// Listen and stopped by Close (or by the Conn closing: peer CLOSE, idle
// timeout), which cancels the Tunnel's context, closes the socket and
// waits for all of them:
//
//   - the driver (run): the only goroutine that touches the Conn. It
//     waits in one select for a received batch, an application request,
//     its timer or the sleeper; takes up to 16 more ready inputs without
//     blocking; then polls events, sends everything the Conn allows in
//     batches of BatchSize datagrams (bind.Conn.WriteBatch: sendmmsg with
//     UDP GSO on Linux) and re-arms its one time.Timer from NextTimeout.
//   - the reader (readLoop): ReadBatch into one of RxBatches pooled
//     batches (8 × 64 datagrams by default) and hand it to the driver
//     over a channel that holds every batch, so the hand-off never
//     blocks. When all batches are in use it waits up to 5 ms, then reads
//     and drops (counted in Stats.RxDropped), as a full socket buffer
//     would; a slow driver therefore never stalls it for long, and two
//     in-memory binds with blocking writes (bindtest) cannot deadlock.
//   - the sleeper (sleepLoop, Linux): see Pacing.
//
// Application goroutines never touch the Conn: each call is a request
// over an unbuffered channel, answered by the driver (Read and Write copy
// straight between the caller's slice and the Conn's stream buffers while
// the caller waits; Lend instead lends room in the send buffer, which the
// caller fills from a socket and commits with its next Lend, so that the
// bytes are copied once, by the kernel). A Write that finds the send
// buffer full (or a Lend that finds less than half of what it asks)
// waits outside the driver for the stream's writable signal (sent on
// EventStreamWritable, a stop-sending or the stream's end), its deadline,
// Close or the tunnel's end, and then asks again. A Read that finds
// nothing is parked in the driver instead (parked.go): the driver fills
// the caller's buffer as data arrives (data in order goes into it straight
// from the opened packet, Conn.StreamReadInto) and answers once the read is
// satisfied, or the stream ends; the reader's deadline or Close cancel
// it, and the tunnel's end answers it. ReadGather parks until it holds
// several packets' worth. Nothing queues without bound: requests are
// unbuffered, a stream parks at most one read, signals have capacity one,
// received batches are pooled, incoming streams wait in a backlog of
// Config.AcceptBacklog (more are refused with wire.OpenResourceLimit),
// and Write blocks while the stream's send buffer (tunnel Config.Stream)
// is full.
//
// While full-size datagrams keep arriving a few at a time, the reader
// holds its next read up to Config.RxHold (2 ms) so that several gather
// per wake-up, as a NIC's interrupt moderation does; ACK-sized datagrams
// and a datagram after a pause are never held (see rxHolder).
//
// # Pacing
//
// The pacer (package cc) releases at most 1 ms worth of data at once;
// at 250 Mbit/s the next packet is due 48 µs after the previous. A Go
// timer shorter than a millisecond fires 1-2 ms late on an idle runtime
// (its poller sleeps in whole milliseconds; measured here: a 200 µs timer
// fires after 1.26 ms on average), and every wakeup later than 1 ms loses
// pacer credit. So after any wakeup the driver sends everything the Conn
// allows, as one batch; and deadlines nearer than 2 ms go to a sleeper
// goroutine that arms a timerfd and waits for it in Go's poller (no
// sooner than 0.5 ms, so that a wakeup carries several packets) and wakes
// the driver. Its system calls, like the socket's, are raw: made through
// the scheduler, each one wakes the runtime's monitor thread, which then
// polls every 20 µs, and on one thread (GOMAXPROCS 1) a call that spans
// one of its ticks loses the P (see sleeper). Further deadlines (ACK delay, loss and probe
// timeouts, keepalive, idle) use the Go timer. Config.TimerOnly turns the
// sleeper off. TestLoopbackPacing checks that a fixed rate is kept, and
// compares the sleeper with the timer alone.
//
// # Throughput
//
// BenchmarkLoopbackThroughput and TestLoopbackTransfer measure one stream
// over loopback UDP, both tunnel ends in one process: throughput, CPU
// seconds per GB and allocations per write (none in the driver). Their
// comments record the figures last measured.
//
// # Peers
//
// Dial talks to one server address. Listen serves one client key on one
// socket and learns the client's address from its first authenticated
// datagram; a later authenticated datagram from another address moves
// the peer there (NAT rebinding), a replay or forgery moves nothing. One
// Listen serves one connection; a demultiplexer that routes many peers'
// datagrams by session index to several Conns on one socket is not done
// yet.
//
// # Far edge restart
//
// A server that restarted holds no session for its former clients: its
// driver answers their data packets with a REJECT naming the unknown
// index (5 bytes, never larger than the packet it answers, at most one
// per 50 ms). REJECT is unauthenticated, so a client never tears its
// session down on it: when one names its current session, the driver
// starts a new handshake in parallel (one at a time, at most one a
// second) while the old session goes on. Only when the new handshake
// completes does it become the tunnel's session; the old session's
// streams are then reset (Read and Write fail with a *StreamError with
// CodePeerRestarted; opens still waiting fail as unreachable), and new
// streams use the new session: within a round trip of the first packet
// the restarted server sees, not after the idle timeout. That handshake
// carries a fresh timestamp and the resume flag (the client still holds a
// session): a restarted server holds none and answers, while a live one
// (the REJECT was forged: anyone on the path can forge one) declines it
// unanswered and keeps the session and its streams; the client's new Conn
// then times out and is dropped. Stats counts RejectsSent, Rehandshakes
// and ResumesDeclined.
//
// Every initiation carries a fresh timestamp, and a server that is given
// one crypt.Timestamps for its process's life (Config.Tunnel.Timestamps,
// as the edge does) answers no initiation twice, across all the tunnels
// it accepts: a captured initiation replayed after a teardown gets no
// answer and moves nothing.
//
// # Handshake floods
//
// A server passes every handshake initiation through a
// tunnel.HandshakeGate before a Conn spends a Diffie-Hellman on it: an
// initiation without a valid mac1 (its sender lacks the server's public
// key) is dropped after a hash; above 32 initiations a second the server
// is under load and answers an initiation without a valid mac2 with a
// cookie reply bound to its source address and port, which a real peer
// uses at once and a spoofed or careless flood cannot; and each source and
// the server as a whole are rate-limited. TestHandshakeFlood: at 20,000
// initiations a second from keys not allowed, the peer's dial completes in
// milliseconds; BenchmarkGateFlood prices a flood initiation at about
// 2 µs. Stats.Gate counts the verdicts.
//
// The other way round, a client that restarted (a new process, so a newer
// timestamp) handshakes with a server whose session is still established:
// the server's driver offers the initiation to a successor Conn that
// shares the session's replay memory (tunnel.Conn.NewSuccessor; at most
// 20 initiations a second are examined), and replaces the session, with
// its streams reset, once the client confirms the new keys. A replayed
// old initiation is refused and changes nothing. Stats counts
// ClientRestarts.
//
// # Close
//
// Tunnel.Close sends CLOSE once and stops; it does not linger to repeat
// CLOSE if the peer keeps sending (a peer that missed it ends by idle
// timeout). Stream data not yet acknowledged is abandoned, so callers
// end streams first (CloseWrite, read to io.EOF). Stream.Close sends FIN
// after the data written, or resets the stream when data from the peer
// is waiting unread (as TCP sends RST), and asks the peer to stop
// sending. Stream.Reset(code) aborts both halves at once (RESET_STREAM
// and STOP_SENDING with code): the edges use it to carry a TCP RST end
// to end (CodeTCPReset).
package driver
