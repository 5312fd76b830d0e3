package tunnel

import (
	"fmt"
	"net/netip"

	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventEstablished: the handshake completed; streams and datagrams
	// may be used. On the server it is reported when the first data packet
	// from the client authenticated (key confirmation).
	EventEstablished EventKind = iota + 1
	// EventClosed: the connection is closed; Err says why (wraps
	// ErrIdleTimeout, ErrHandshakeTimeout, ErrPeerClosed, ErrLocalClose or
	// ErrProtocol). It is the last event.
	EventClosed
	// EventStreamOpened: the peer opened stream StreamID for a flow from
	// Src to Dst over Proto. Answer with AcceptStream or RejectStream.
	EventStreamOpened
	// EventOpenResult: the peer answered our OpenStream for StreamID with
	// OpenCode. On wire.OpenOK data flows; otherwise the stream is gone.
	EventOpenResult
	// EventStreamReadable: StreamRead on StreamID returns data, the end of
	// the stream or a reset. It is reported again only after a StreamRead
	// returned fewer bytes than asked for (the application drained the
	// stream), so read until then.
	EventStreamReadable
	// EventStreamWritable: StreamWrite on StreamID accepts bytes again
	// after it accepted fewer than offered.
	EventStreamWritable
	// EventStreamReset: the peer reset its sending half of StreamID with
	// Code (RESET_STREAM); unread data is discarded.
	EventStreamReset
	// EventStreamStopSending: the peer asked us to stop sending on
	// StreamID with Code (STOP_SENDING); the connection has reset our
	// sending half with that code.
	EventStreamStopSending
	// EventStreamClosed: StreamID is finished in both directions and
	// forgotten; its ID is no longer valid.
	EventStreamClosed
	// EventDatagram: a datagram arrived; Data holds it.
	EventDatagram
	// EventRejected (client): a REJECT arrived naming this session's
	// remote index, as after a server restart. REJECT is unauthenticated:
	// the session stays; the application may handshake in a new Conn and
	// switch to it once that authenticates.
	EventRejected
	// EventHandshakeRefused (server): a handshake initiation that passed
	// the gate was refused unanswered. Err wraps crypt.ErrAuth (message 1
	// did not decrypt), crypt.ErrUnknownPeer (a key not allowed) or
	// crypt.ErrReplay; PeerKey is the initiator's key for the last two.
	// The application counts it; the Conn goes on as if it had not come.
	EventHandshakeRefused
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventEstablished:
		return "established"
	case EventClosed:
		return "closed"
	case EventStreamOpened:
		return "stream opened"
	case EventOpenResult:
		return "open result"
	case EventStreamReadable:
		return "stream readable"
	case EventStreamWritable:
		return "stream writable"
	case EventStreamReset:
		return "stream reset"
	case EventStreamStopSending:
		return "stream stop sending"
	case EventStreamClosed:
		return "stream closed"
	case EventDatagram:
		return "datagram"
	case EventRejected:
		return "rejected"
	case EventHandshakeRefused:
		return "handshake refused"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something the application must learn, returned by
// Conn.PollEvent. Only the fields its Kind names are set.
type Event struct {
	Kind     EventKind
	StreamID uint64
	// Proto, Src and Dst describe the flow of EventStreamOpened.
	Proto    wire.Proto
	Src, Dst netip.AddrPort
	// OpenCode is the outcome of EventOpenResult.
	OpenCode wire.OpenCode
	// Code is the peer's error code of EventStreamReset and
	// EventStreamStopSending.
	Code wire.ErrorCode
	// Data is the payload of EventDatagram. It belongs to the Conn and is
	// valid until the next call to PollEvent.
	Data []byte
	// Err is the reason of EventClosed and EventHandshakeRefused.
	Err error
	// PeerKey is the initiator's static key of EventHandshakeRefused when
	// message 1 decrypted (zero otherwise).
	PeerKey crypt.PublicKey
}

// eventQueue is a FIFO of events reusing its storage.
type eventQueue struct {
	q    []Event
	head int
}

func (e *eventQueue) push(ev Event) {
	if e.head > 0 && e.head == len(e.q) {
		e.q, e.head = e.q[:0], 0
	}
	e.q = append(e.q, ev)
}

func (e *eventQueue) pop() (Event, bool) {
	if e.head >= len(e.q) {
		e.q, e.head = e.q[:0], 0
		return Event{}, false
	}
	ev := e.q[e.head]
	e.q[e.head] = Event{}
	e.head++
	return ev, true
}
