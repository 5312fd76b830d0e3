package tunnel

import "errors"

// Sentinel errors. Errors returned by this package, and the Err of an
// EventClosed, wrap one of them (test with errors.Is) and add context. None
// of them ever carries key material.
var (
	// ErrIdleTimeout: nothing authenticated arrived from the peer for
	// Config.IdleTimeout (a WAN outage longer than that, or the peer went
	// away). The connection is closed; open a new one.
	ErrIdleTimeout = errors.New("tunnel: idle timeout: nothing heard from the peer")

	// ErrHandshakeTimeout: the handshake did not complete within
	// Config.IdleTimeout. Check that the peer runs, that its address is
	// right and that it has our public key on its allow-list.
	ErrHandshakeTimeout = errors.New("tunnel: handshake timed out (peer unreachable, or our key is not on its allow-list)")

	// ErrPeerClosed: the peer closed the connection (its CLOSE frame's code
	// and reason are in the error text).
	ErrPeerClosed = errors.New("tunnel: closed by the peer")

	// ErrPeerLostSession reports that the peer answered our rekey without
	// the session: it restarted, and the connection's streams are gone.
	ErrPeerLostSession = errors.New("tunnel: the peer no longer holds the connection (it restarted)")

	// ErrLocalClose: Close was called on this side.
	ErrLocalClose = errors.New("tunnel: closed locally")

	// ErrProtocol: the peer broke the protocol (a malformed frame, an
	// impossible ACK, a flow-control violation); the connection was closed
	// with the matching CLOSE code.
	ErrProtocol = errors.New("tunnel: peer protocol violation")

	// ErrClosed: the call needs an open connection, and this one is closed
	// or closing.
	ErrClosed = errors.New("tunnel: connection closed")

	// ErrNotEstablished: the call needs a completed handshake. Wait for
	// EventEstablished.
	ErrNotEstablished = errors.New("tunnel: connection not established yet; wait for EventEstablished")

	// ErrUnknownStream: no open stream has this ID (never opened, or
	// already finished and forgotten).
	ErrUnknownStream = errors.New("tunnel: unknown stream")

	// ErrStreamState: the stream is not in a state that allows the call
	// (for example AcceptStream twice, or OpenStream beyond the limit).
	ErrStreamState = errors.New("tunnel: stream state does not allow this")

	// ErrStreamLimit: too many streams are open (Config.MaxStreams).
	// Retry when one has finished.
	ErrStreamLimit = errors.New("tunnel: too many open streams")

	// ErrDatagramTooLarge: a datagram does not fit in one packet; see
	// Conn.MaxDatagramBytes.
	ErrDatagramTooLarge = errors.New("tunnel: datagram larger than a packet can carry")

	// ErrDatagramQueueFull: too many datagrams are waiting to be sent; the
	// datagram was dropped (datagrams are unreliable).
	ErrDatagramQueueFull = errors.New("tunnel: datagram queue full; dropped")

	// ErrConfig: the Config is unusable; the message says which field.
	ErrConfig = errors.New("tunnel: invalid config")
)
