// Tests that malformed input never panics the Conn: authenticated packets
// full of garbage frames from a peer that holds the keys, and arbitrary
// datagrams (fuzzed) from anyone.

package tunnel

import (
	"errors"
	"testing"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// sealAs builds a data packet from the client's session with the given
// plaintext frames, as a peer that holds the keys but misbehaves would.
func sealAs(c *Conn, payload []byte) []byte {
	pn := c.sender.NextPacketNumber()
	h := wire.Header{Type: wire.PacketData, ReceiverIndex: c.sess.RemoteIndex(), PacketNumber: pn, PNLen: 4}
	b := wire.AppendHeader(nil, &h)
	out, err := c.sess.Seal(b[len(b):len(b)], b, payload, pn)
	if err != nil {
		panic(err)
	}
	c.sender.OnPacketSent(1, pn, len(b)+len(out), false, 0)
	return append(b, out...)
}

// TestAuthenticatedGarbageNeverPanics feeds the server authenticated
// packets full of random and mutated frames: each either is processed or
// closes the connection (ErrProtocol, or ErrPeerClosed for a CLOSE frame);
// nothing panics.
func TestAuthenticatedGarbageNeverPanics(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		n := newTestNet(t, 60+seed%3, path100ms, nil)
		establish(t, n)
		now := n.sim.Now()
		r := seededReader(seed)
		for i := 0; i < 20 && !n.server.c.Closed(); i++ {
			p := make([]byte, 1+r.Uint64()%200)
			r.Read(p)
			// Make the first byte a real frame type more often than not.
			types := []byte{0x01, 0x02, 0x04, 0x05, 0x08, 0x0a, 0x0e, 0x0f, 0x10, 0x11, 0x1c, 0x20, 0x21, 0x30, 0x31}
			p[0] = types[int(r.Uint64()%uint64(len(types)))]
			n.server.c.HandleDatagram(now, sealAs(n.client.c, p))
			n.server.c.PollTransmit(now, make([]byte, 1500))
			for {
				if _, ok := n.server.c.PollEvent(); !ok {
					break
				}
			}
			n.server.c.HandleTimeout(now)
			now += monotime.Time(1000)
		}
		if err := n.server.c.Err(); err != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrPeerClosed) {
			t.Fatalf("seed %d: closed with %v, want ErrProtocol", seed, err)
		}
	}
}

// FuzzHandleDatagram: arbitrary datagrams to an established server never
// panic and never authenticate.
func FuzzHandleDatagram(f *testing.F) {
	f.Add([]byte{0x11, 0, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{0x01})
	f.Add(make([]byte, 113))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := newTestNet(t, 70, path100ms, nil)
		establish(t, n)
		before := n.server.c.Stats()
		n.server.c.HandleDatagram(n.sim.Now(), b)
		after := n.server.c.Stats()
		if after.PacketsReceived != before.PacketsReceived {
			t.Fatalf("a random datagram was accepted")
		}
		if after.DroppedPackets != before.DroppedPackets+1 {
			t.Fatalf("not counted as dropped")
		}
	})
}
