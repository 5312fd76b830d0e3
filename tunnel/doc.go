// Package tunnel is wanopt's WAN transport: one encrypted, congestion-
// controlled connection per peer pair, carrying many reliable streams (one
// per intercepted TCP flow) and unreliable datagrams.
//
// # Sans-IO
//
// Conn is a state machine in the style of quinn-proto: it owns no socket,
// goroutine or clock. A driver feeds it datagrams (HandleDatagram) and the
// time (HandleTimeout), pulls datagrams to send (PollTransmit) and events
// (PollEvent), and arms one timer at NextTimeout. Every entry point that
// depends on time takes now, a monotime.Time. The same code runs under the
// UDP driver and under the deterministic simulator bench/netsim, which is
// how the tests below measure it.
//
// # Handshake and packets
//
// The client (NewClientConn) knows the server's static key and sends a
// Noise IK initiation (package crypt), retransmitted every second
// until answered or Config.IdleTimeout passes
// (ErrHandshakeTimeout). The server (NewServerConn) answers only an
// initiation that authenticates, comes from a key its policy allows and
// carries a fresh timestamp; anything else costs no state and gets no
// answer. Its response (67 bytes) is shorter than the initiation (147
// bytes), and it sends nothing else until the client's first data packet
// has authenticated (key confirmation), so the server cannot be used to
// amplify traffic toward a spoofed address. The client sends that first
// packet (a PING if it has nothing else) as soon as it holds the keys.
//
// Data packets follow package wire: a cleartext header with the peer's
// session index and a truncated packet number, then frames sealed with
// ChaCha20-Poly1305 under the packet number (16-byte tag). Packets are
// built and sealed in place in the caller's buffer; received packets are
// opened into a buffer owned by the Conn, so the caller's datagram is never
// modified. A packet that does not parse, names another session, fails
// authentication or repeats a packet number is counted in Stats and
// dropped. A malformed frame inside an authenticated packet, an impossible
// ACK or a flow-control violation is a protocol violation: the connection
// closes with the matching CLOSE code (ErrProtocol).
//
// One packet-number space covers the connection. Loss detection, probe
// timeouts, ACK generation (package recovery) and the congestion controller
// (package cc: BBR by default, paced) are per connection, not per stream:
// a new stream on a warm connection starts at the rate the controller has
// already measured, with no slow start, and idle periods keep the model.
// Each sent packet's frames are recorded in a ring (records.go); when the
// packet is acknowledged or declared lost the records say what to release
// or send again. Stream data is retransmitted by range in new packets;
// control frames are re-queued with their latest value.
//
// # What a packet carries
//
// PollTransmit fills one datagram of at most Config.MaxUDPPayloadBytes
// (1472 by default: 1500-byte IPv4 packets) in this order: an ACK if one is
// due (a delayed-ACK policy; ACKs are not piggybacked on every packet, which
// would cost about 10 bytes each), then control frames (MAX_DATA,
// OPEN_RESULT, STREAM_OPEN, RESET_STREAM, STOP_SENDING, MAX_STREAM_DATA),
// a PING when a keepalive or a probe needs one, queued datagrams, then
// stream data, one frame per stream in round-robin order, the last frame
// without a length field so the packet is filled exactly. A full bulk
// packet carries 1443 bytes of stream data (29 bytes of overhead). ACK-only
// packets bypass the congestion window and the pacer; everything else waits
// for both. In steady state no call on the packet path allocates.
//
// # Streams
//
// Stream IDs are even for streams the client opens and odd for the server's.
// OpenStream sends STREAM_OPEN with the flow's original source and
// destination; the peer's application sees EventStreamOpened and answers
// AcceptStream or RejectStream, which sends OPEN_RESULT. Data written on
// our side before the answer is buffered and sent only after wire.OpenOK,
// so a refused or unreachable destination never receives bytes (the local
// TCP client's SYN is answered only then); the accepting side may write at
// once after AcceptStream, and the opener accepts its data even if it
// overtakes OPEN_RESULT. FIN and reset pass
// end to end and each direction closes on its own (half-close). A stream is
// forgotten (EventStreamClosed) when both directions are finished: our FIN
// or reset acknowledged, and the peer's FIN or reset seen by the
// application (or reading stopped).
//
// Buffers and credit belong to package stream: per-stream send buffers and
// receive windows that auto-tune from the RTT up to Config.Stream limits,
// a connection window, and a memory budget. The connection announces new
// stream credit (MAX_STREAM_DATA) after the application reads, and new
// connection credit (MAX_DATA) as bytes arrive, within a cap on those
// unread, so that a stream nobody reads holds only its own credit. On a
// connection that has received stream data, a new stream's receive window
// starts at twice the measured bandwidth-delay product (the peer's delivery
// rate times the smoothed RTT), granted with STREAM_OPEN or OPEN_RESULT and
// shared from the memory budget, so the flow starts at the path's rate
// (see openwindow.go).
//
// # Liveness
//
// Any authenticated packet from the peer restarts the idle timer
// (Config.IdleTimeout, 20 minutes by default: longer than Linux TCP's
// retransmission budget, so the tunnel never ends a flow that TCP would
// have kept through an outage); so does our first ack-eliciting packet
// after it. When it expires the connection closes with ErrIdleTimeout,
// silently, at both ends. While data is outstanding, probe timeouts keep
// retrying with exponential backoff capped at half a second
// (recovery.SenderConfig.MaxProbeInterval), so the path's return is
// noticed within half a second plus one round trip, and the streams go on where
// they stopped. With nothing to send, a PING goes out every
// Config.KeepAliveInterval (10 s by default). Close sends CLOSE (repeated
// if the peer keeps sending, for three probe timeouts); the peer reports
// ErrPeerClosed.
//
// Every initiation carries a fresh timestamp (Config.HandshakeTimestamp
// plus the time since the Conn was created). A server's established Conn
// ignores handshake initiations; the driver offers a new one to
// NewSuccessor, which shares the replay memory and so answers only a newer
// initiation, and declines one whose client says it still holds the
// session (Config.Resume, PeerResuming). Config.Timestamps carries the
// memory across Conns.
//
// # Rekeying
//
// The client rekeys the session every Config.RekeyAfter (two minutes) or
// RekeyAfterPackets (2^23, AES-GCM's confidentiality limit) inside the
// connection: a handshake with the rekey flag, answered through the
// driver's successor Conn and AcceptRekey, after which both sides seal
// with the new keys (the server once the client's first packet under them
// confirms them) and still open late packets under the previous ones.
// Streams, loss recovery and congestion control carry on
// (TestRekeyDuringTransfer, and over real UDP TestLoopbackRekey).
//
// # Not done yet
//
// REJECT packets are handled outside the session: a server's caller sends
// AppendReject's answer to data for a session it does not hold, and a
// client reports a REJECT naming its session as EventRejected, without
// acting on it (package driver then handshakes again in a new Conn).
//
// Sending DATA_BLOCKED and STREAM_DATA_BLOCKED, ECN, and a server-side
// demultiplexer for many peers (one Conn per peer pair; the
// driver routes by the receiver index in the header) are left for later.
package tunnel
