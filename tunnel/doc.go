// Package tunnel is wanopt's WAN transport: one encrypted, congestion-
// controlled connection per peer pair, carrying many reliable streams (one
// per intercepted TCP flow) and unreliable datagrams.
//
// # Sans-IO
//
// Conn is a state machine in the style of quinn-proto: it owns no socket,
// goroutine or clock. A driver feeds it datagrams (HandleDatagram) and the
// time (HandleTimeout), pulls datagrams to send (PollTransmit) and events
// (PollEvent), and arms one timer at NextTimeout. The same code runs under
// the UDP driver (package driver) and the simulator internal/netsim the tests
// use.
//
// # Handshake and packets
//
// The client sends a Noise IK initiation (package crypt); the server
// answers only one that authenticates, comes from an allowed key and
// carries a fresh timestamp, and sends nothing more until the client's
// first data packet confirms the keys, so it cannot amplify (see
// NewServerConn). Data packets follow package wire: a cleartext header
// with the peer's session index and a truncated packet number, then
// sealed frames. They are sealed in place in the caller's buffer and
// opened into a buffer of the Conn's. A packet that does not parse, names
// another session, fails authentication or repeats a packet number is
// counted in Stats and dropped; a malformed frame, an impossible ACK or a
// flow-control violation in an authenticated packet closes the connection
// (ErrProtocol).
//
// One packet-number space, loss recovery and ACK policy (package
// recovery) and congestion controller (package cc, BBR by default) serve
// the whole connection, so a new stream on a warm connection starts at the
// rate already measured. Each packet's frames are recorded (records.go);
// on loss, stream data is resent by range in new packets and control
// frames with their latest value. A packet carries, in order: a due ACK,
// control frames, a PING when a keepalive or probe needs one, datagrams,
// then stream data round-robin, the last frame filling the packet. ACK-only
// packets bypass the congestion window and the pacer. In steady state the
// packet path does not allocate (TestSteadyStateAllocations).
//
// # Streams
//
// Client streams have even IDs, server streams odd. STREAM_OPEN carries
// the flow's original addresses; the peer answers with AcceptStream or
// RejectStream, and data written before the answer waits for wire.OpenOK.
// Each direction closes on its own (FIN or reset); a stream is forgotten
// (EventStreamClosed) once both are finished. Buffers, windows and the
// memory budget belong to package stream; a new stream on a warm
// connection is granted twice the measured bandwidth-delay product
// (openwindow.go).
//
// # Liveness and restarts
//
// Any authenticated packet restarts the idle timer (Config.IdleTimeout);
// when it expires the connection closes silently with ErrIdleTimeout.
// Probe timeouts back off to at most half a second, so a path's return is
// noticed quickly and streams go on. An idle connection sends a PING every
// Config.KeepAliveInterval. Close sends CLOSE; the peer reports
// ErrPeerClosed. The client rekeys inside the connection (rekey.go). A
// restarted client is served by NewSuccessor; a restarted server answers
// unknown sessions with AppendReject, and a client reports a REJECT as
// EventRejected without acting on it (package driver handshakes again). A
// server reports each initiation it refuses (one that does not decrypt,
// an unknown key, a replay) as EventHandshakeRefused, with the key where
// message 1 revealed it, so the operator learns which edge knocks. A
// Hub in package driver serves many peers on one socket. DATA_BLOCKED,
// STREAM_DATA_BLOCKED and ECN are not sent.
package tunnel
