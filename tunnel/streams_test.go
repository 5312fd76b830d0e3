package tunnel

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// establish runs n until both ends are established.
func establish(t *testing.T, n *testNet) {
	t.Helper()
	n.runUntil(t, 5*time.Second, func() bool { return n.client.c.Established() && n.server.c.Established() })
}

// eventOf returns the first recorded event of kind k for stream id.
func eventOf(e *simEnd, k EventKind, id uint64) (Event, bool) {
	for _, ev := range e.events {
		if ev.Kind == k && ev.StreamID == id {
			return ev, true
		}
	}
	return Event{}, false
}

func TestStreamRejected(t *testing.T) {
	n := newTestNet(t, 41, path100ms, nil)
	n.server.onEvent = func(now monotime.Time, ev Event) {
		if ev.Kind == EventStreamOpened {
			if ev.Dst != testDst || ev.Src != testSrc || ev.Proto != wire.ProtoTCP {
				t.Errorf("opened with %v %v -> %v", ev.Proto, ev.Src, ev.Dst)
			}
			if err := n.server.c.RejectStream(ev.StreamID, wire.OpenRefused); err != nil {
				t.Error(err)
			}
		}
	}
	establish(t, n)
	id, err := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.c.StreamWrite(id, []byte("held until the open succeeds")); err != nil {
		t.Fatal(err)
	}
	n.sim.Wake(n.flow)
	n.runUntil(t, 5*time.Second, func() bool { _, ok := eventOf(n.client, EventOpenResult, id); return ok })
	ev, _ := eventOf(n.client, EventOpenResult, id)
	if ev.OpenCode != wire.OpenRefused {
		t.Errorf("open result %v, want refused", ev.OpenCode)
	}
	if _, err := n.client.c.StreamWrite(id, []byte("x")); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("write after refusal: %v, want ErrUnknownStream", err)
	}
	n.sim.RunFor(time.Second)
	if got := n.server.c.Stats().StreamBytesReceived; got != 0 {
		t.Errorf("server received %d stream bytes for a refused stream", got)
	}
	if a, b := n.client.c.Stats().StreamsOpen, n.server.c.Stats().StreamsOpen; a+b != 0 {
		t.Errorf("streams still open: client %d server %d", a, b)
	}
}

func TestStreamHalfCloseAndForget(t *testing.T) {
	n := newTestNet(t, 42, path100ms, nil)
	req, resp := []byte("GET / HTTP/1.0\r\n\r\n"), bytes.Repeat([]byte("response "), 10000)
	var gotReq, gotResp []byte
	buf := make([]byte, 4096)
	n.server.onEvent = func(now monotime.Time, ev Event) {
		c := n.server.c
		switch ev.Kind {
		case EventStreamOpened:
			c.AcceptStream(ev.StreamID)
		case EventStreamReadable:
			for {
				k, fin, err := c.StreamRead(ev.StreamID, buf)
				if err != nil {
					t.Error(err)
				}
				gotReq = append(gotReq, buf[:k]...)
				if fin {
					// The client half-closed: answer and close our half.
					if w, _ := c.StreamWrite(ev.StreamID, resp); w != len(resp) {
						t.Errorf("wrote %d of %d", w, len(resp))
					}
					c.StreamCloseWrite(ev.StreamID)
				}
				if k < len(buf) {
					break
				}
			}
		}
	}
	n.client.onEvent = func(now monotime.Time, ev Event) {
		c := n.client.c
		switch ev.Kind {
		case EventOpenResult:
			c.StreamWrite(ev.StreamID, req)
			c.StreamCloseWrite(ev.StreamID)
		case EventStreamReadable:
			for {
				k, _, err := c.StreamRead(ev.StreamID, buf)
				if err != nil {
					t.Error(err)
				}
				gotResp = append(gotResp, buf[:k]...)
				if k < len(buf) {
					break
				}
			}
		}
	}
	establish(t, n)
	id, _ := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst)
	n.sim.Wake(n.flow)
	n.runUntil(t, 10*time.Second, func() bool {
		_, a := eventOf(n.client, EventStreamClosed, id)
		_, b := eventOf(n.server, EventStreamClosed, id)
		return a && b
	})
	if !bytes.Equal(gotReq, req) || !bytes.Equal(gotResp, resp) {
		t.Errorf("request %d bytes, response %d bytes; want %d and %d", len(gotReq), len(gotResp), len(req), len(resp))
	}
	if a, b := n.client.c.Stats().StreamsOpen, n.server.c.Stats().StreamsOpen; a+b != 0 {
		t.Errorf("streams still open: client %d server %d", a, b)
	}
}

func TestStreamResetAndStopSending(t *testing.T) {
	n := newTestNet(t, 43, path100ms, nil)
	var ids []uint64
	n.server.onEvent = func(now monotime.Time, ev Event) {
		switch ev.Kind {
		case EventStreamOpened:
			n.server.c.AcceptStream(ev.StreamID)
			ids = append(ids, ev.StreamID)
			if len(ids) == 2 {
				// The second stream: the server's application stops reading.
				n.server.c.StreamStopSending(ev.StreamID, 77)
			}
		}
	}
	n.client.onEvent = func(now monotime.Time, ev Event) {
		if ev.Kind == EventStreamReadable {
			if k, fin, err := n.client.c.StreamRead(ev.StreamID, make([]byte, 10)); k != 0 || !fin || err != nil {
				t.Errorf("read %d, %v, %v; want the FIN only", k, fin, err)
			}
		}
		if ev.Kind == EventOpenResult {
			n.client.c.StreamWrite(ev.StreamID, bytes.Repeat([]byte{1}, 100000))
			if ev.StreamID == 0 {
				n.client.c.StreamReset(ev.StreamID, 42)
			}
		}
	}
	establish(t, n)
	a, _ := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst)
	b, _ := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst)
	n.sim.Wake(n.flow)
	n.runUntil(t, 10*time.Second, func() bool {
		_, x := eventOf(n.server, EventStreamReset, a)
		_, y := eventOf(n.client, EventStreamStopSending, b)
		return x && y
	})
	if ev, _ := eventOf(n.server, EventStreamReset, a); ev.Code != 42 {
		t.Errorf("reset code %d, want 42", ev.Code)
	}
	if ev, _ := eventOf(n.client, EventStreamStopSending, b); ev.Code != 77 {
		t.Errorf("stop-sending code %d, want 77", ev.Code)
	}
	// Stop-sending reset the client's sending half of b.
	if _, err := n.client.c.StreamWrite(b, []byte("x")); !errors.Is(err, ErrStreamState) {
		t.Errorf("write after STOP_SENDING: %v, want ErrStreamState", err)
	}
	// The server closes its halves; both streams are then forgotten at both ends.
	for _, id := range []uint64{a, b} {
		n.server.c.StreamCloseWrite(id)
		n.server.c.StreamStopSending(id, 0)
	}
	n.sim.Wake(n.flow)
	n.runUntil(t, 5*time.Second, func() bool {
		return n.client.c.Stats().StreamsOpen == 0 && n.server.c.Stats().StreamsOpen == 0
	})
}

func TestDatagrams(t *testing.T) {
	n := newTestNet(t, 44, path100ms, nil)
	var got [][]byte
	n.server.onEvent = func(now monotime.Time, ev Event) {
		if ev.Kind == EventDatagram {
			got = append(got, append([]byte(nil), ev.Data...))
		}
	}
	establish(t, n)
	max := n.client.c.MaxDatagramBytes()
	if err := n.client.c.SendDatagram(make([]byte, max+1)); !errors.Is(err, ErrDatagramTooLarge) {
		t.Errorf("oversized datagram: %v", err)
	}
	var want [][]byte
	for i := range 50 {
		d := []byte(fmt.Sprintf("datagram %d", i))
		if i == 7 {
			d = bytes.Repeat([]byte{7}, max)
		}
		want = append(want, d)
		if err := n.client.c.SendDatagram(d); err != nil {
			t.Fatal(err)
		}
	}
	n.sim.Wake(n.flow)
	n.runUntil(t, 5*time.Second, func() bool { return len(got) == len(want) })
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d differs", i)
		}
	}
	if st := n.client.c.Stats(); st.DatagramsSent != 50 {
		t.Errorf("DatagramsSent = %d", st.DatagramsSent)
	}
}

func TestCloseReachesPeer(t *testing.T) {
	n := newTestNet(t, 45, path100ms, nil)
	establish(t, n)
	n.client.c.Close(n.sim.Now(), wire.CloseShutdown, "maintenance")
	n.client.drain(n.sim.Now())
	n.sim.Wake(n.flow)
	n.runUntil(t, 5*time.Second, func() bool { return n.server.c.Closed() })
	if err := n.server.closedErr(); !errors.Is(err, ErrPeerClosed) {
		t.Errorf("server: %v, want ErrPeerClosed", err)
	}
	if err := n.client.closedErr(); !errors.Is(err, ErrLocalClose) {
		t.Errorf("client: %v, want ErrLocalClose", err)
	}
	if _, err := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst); !errors.Is(err, ErrClosed) {
		t.Errorf("open after close: %v", err)
	}
	n.runUntil(t, 10*time.Second, func() bool { return n.client.c.NextTimeout() == 0 })
}

func TestOpenBeforeEstablished(t *testing.T) {
	cc, _ := pairConfigs(t, 46)
	c, err := NewClientConn(cc, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenStream(1, testSrc, testDst); !errors.Is(err, ErrNotEstablished) {
		t.Errorf("OpenStream before the handshake: %v", err)
	}
	if err := c.SendDatagram([]byte("x")); !errors.Is(err, ErrNotEstablished) {
		t.Errorf("SendDatagram before the handshake: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cc, sc := pairConfigs(t, 47)
	bad := []struct {
		name   string
		client bool
		mod    func(*Config)
	}{
		{"no private key", true, func(c *Config) { c.PrivateKey = [32]byte{} }},
		{"client without peer", true, func(c *Config) { c.PeerPublicKey = [32]byte{} }},
		{"client without timestamp", true, func(c *Config) { c.HandshakeTimestamp = 0 }},
		{"server without policy", false, func(c *Config) { c.PeerPublicKey = [32]byte{} }},
		{"tiny payload", true, func(c *Config) { c.MaxUDPPayloadBytes = 100 }},
		{"fixed without rate", true, func(c *Config) { c.Congestion = CCFixed }},
	}
	for _, b := range bad {
		var err error
		if b.client {
			c := cc
			b.mod(&c)
			_, err = NewClientConn(c, 1)
		} else {
			c := sc
			b.mod(&c)
			_, err = NewServerConn(c, 1)
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", b.name, err)
		}
	}
}

// TestResetBeforeOpenResultOverLossyPath opens streams and resets them at
// once, on a path that loses and reorders a lot: RESET_STREAM must never
// reach the peer before its STREAM_OPEN (that would be a protocol
// violation), and every stream must end up forgotten at both ends.
func TestResetBeforeOpenResultOverLossyPath(t *testing.T) {
	path := pathConfig{rateBps: 10_000_000, rtt: 60 * time.Millisecond, lossPct: 20, reorderPct: 20}
	n := newTestNet(t, 48, path, nil)
	buf := make([]byte, 1024)
	drainRead := func(c *Conn, id uint64) {
		for {
			k, fin, err := c.StreamRead(id, buf)
			if err != nil || fin || k < len(buf) {
				return
			}
		}
	}
	n.server.onEvent = func(now monotime.Time, ev Event) {
		c := n.server.c
		switch ev.Kind {
		case EventStreamOpened:
			c.AcceptStream(ev.StreamID)
			c.StreamWrite(ev.StreamID, []byte("hello"))
			c.StreamCloseWrite(ev.StreamID)
		case EventStreamReadable:
			drainRead(c, ev.StreamID)
		}
	}
	n.client.onEvent = func(now monotime.Time, ev Event) {
		if ev.Kind == EventStreamReadable {
			drainRead(n.client.c, ev.StreamID)
		}
	}
	establish(t, n)
	// Each stream is opened, and reset 5 ms later, in a packet of its own.
	const streams = 50
	t0 := n.sim.Now()
	for i := range streams {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		var id uint64
		n.sim.At(at, func() {
			var err error
			if id, err = n.client.c.OpenStream(n.sim.Now(), testSrc, testDst); err != nil {
				t.Error(err)
			}
			n.client.c.StreamWrite(id, []byte("never sent"))
			n.sim.Wake(n.flow)
		})
		n.sim.At(at.Add(5*time.Millisecond), func() {
			if err := n.client.c.StreamReset(id, 9); err != nil {
				t.Error(err)
			}
			n.sim.Wake(n.flow)
		})
	}
	n.runUntil(t, 60*time.Second, func() bool {
		return n.client.c.Stats().StreamsOpen == 0 && n.server.c.Stats().StreamsOpen == 0 &&
			n.server.c.Stats().StreamsAccepted == streams
	})
	if n.client.c.Closed() || n.server.c.Closed() {
		t.Fatalf("connection closed: client %v, server %v", n.client.c.Err(), n.server.c.Err())
	}
	if got := n.server.c.Stats().StreamBytesReceived; got != 0 {
		t.Errorf("server received %d bytes of reset streams", got)
	}
	t.Logf("all %d streams forgotten at %v; client lost %d packets", streams, n.sim.Elapsed(), n.client.c.Stats().PacketsLost)
}
