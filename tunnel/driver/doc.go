// Package driver runs a sans-IO tunnel.Conn over a UDP socket (a
// bind.Conn) and gives the rest of the program streams: Dial and Listen
// return a Tunnel once the handshake is done; OpenStream and AcceptStream
// give *Stream values that are io.Reader, io.Writer and half-closable,
// with net.Conn deadlines. The near edge calls OpenStream for an
// intercepted SYN and answers the SYN only when it returns; the far edge
// calls AcceptStream, connects to Dst, then Accept or Reject.
//
// # Goroutines
//
// Dial or Listen start two goroutines, three on Linux; Close (or the Conn
// closing) cancels the Tunnel's context, closes the socket and waits for
// them:
//
//   - the driver (run, loop.go): the only goroutine that touches the
//     Conn. It waits for a received batch, an application request, its
//     timer or the sleeper, takes up to 16 more ready inputs, then sends
//     everything the Conn allows in batches (sendmmsg with UDP GSO on
//     Linux) and re-arms its timer.
//   - the reader (readLoop, reader.go): ReadBatch into pooled batches
//     handed to the driver over a channel that holds them all, so the
//     hand-off never blocks; when all are in use it waits up to 5 ms,
//     then reads and drops, as a full socket buffer would. While
//     full-size datagrams arrive a few at a time it holds its next read
//     up to Config.RxHold, as a NIC's interrupt moderation does.
//   - the sleeper (Linux): wakes the driver for deadlines nearer than
//     2 ms, which a Go timer would meet 1-2 ms late and so lose pacer
//     credit (TestLoopbackPacing; Config.TimerOnly turns it off).
//
// Application goroutines never touch the Conn: each call is a request
// over an unbuffered channel (requests.go). Read and Write copy between
// the caller's slice and the Conn's buffers while the caller waits; Lend
// lends send-buffer room for the caller to fill from a socket. A Write
// that finds the buffer full waits outside the driver for the stream's
// writable signal; a Read that finds nothing is parked in the driver,
// which fills the caller's buffer as data arrives (parked.go). Nothing
// queues without bound: requests are unbuffered, a stream parks one read,
// signals have capacity one, batches are pooled, and incoming streams
// wait in a backlog of Config.AcceptBacklog (more are refused with
// wire.OpenResourceLimit).
//
// # Peers and restarts
//
// Dial talks to one server address. Listen serves one client key on one
// socket and follows the client's address as authenticated datagrams
// come from it (NAT rebinding); a Hub serves many peers on one socket. A
// server gates every initiation (tunnel.HandshakeGate: mac1, cookies
// under load, rate limits) before any Diffie-Hellman (TestHandshakeFlood).
// A restarted server answers unknown sessions with a REJECT; the client
// handshakes again beside the old session and switches once the new one
// completes, resetting the old streams with CodePeerRestarted. A
// restarted client's newer initiation replaces a server's session the
// same way (restart.go).
//
// # Close
//
// Tunnel.Close sends CLOSE once and stops; a peer that missed it ends by
// idle timeout. Stream data not yet acknowledged is abandoned, so callers
// end streams first (CloseWrite, read to io.EOF). Stream.Close sends FIN
// after the data written, or resets the stream when data from the peer
// is waiting unread (as TCP sends RST). Stream.Reset(code) aborts both
// halves at once: the edges carry a TCP RST end to end with it
// (CodeTCPReset).
package driver
