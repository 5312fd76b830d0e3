// Tests that malformed input never panics the Conn: authenticated packets
// full of garbage frames from a peer that holds the keys, and arbitrary
// datagrams (fuzzed) from anyone.

package tunnel

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// sealAs builds a data packet from the client's session with the given
// plaintext frames, as a peer that holds the keys but misbehaves would.
func sealAs(c *Conn, payload []byte) []byte {
	pn := c.sender.NextPacketNumber()
	h := wire.Header{Type: wire.PacketData, ReceiverIndex: c.sess.RemoteIndex(), PacketNumber: pn, PNLen: 4}
	b := wire.AppendHeader(nil, &h)
	out, err := c.sess.Seal(b[len(b):], b, payload, pn)
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
	for sd := uint64(0); sd < 300; sd++ {
		n := newTestNet(t, 60+sd%3, path100ms, nil)
		establish(t, n)
		now := n.sim.Now()
		r := seed.ChaCha8(sd)
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
			t.Fatalf("seed %d: closed with %v, want ErrProtocol", sd, err)
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

// FuzzLentFrames: authenticated packets of fuzzed frames reach a server
// whose stream has a reader's buffer lent to it (StreamReadInto, as the
// driver's parked reads do). The input is up to four packets' plaintexts,
// each led by its length byte. Nothing panics; a lend never reports more
// than its room; every byte the reader gets, lent or read, is one the
// client's frames carried at that offset; and the connection goes on or
// closes with ErrProtocol or ErrPeerClosed.
func FuzzLentFrames(f *testing.F) {
	const id = 0 // the client's first stream
	frame := func(off uint64, data string, fin bool) []byte {
		f := wire.StreamFrame{StreamID: id, Offset: off, Data: []byte(data), Fin: fin}
		return f.Append(nil)
	}
	packets := func(ps ...[]byte) []byte {
		var b []byte
		for _, p := range ps {
			b = append(append(b, byte(len(p))), p...)
		}
		return b
	}
	f.Add(packets(frame(5, "in order", false)))
	f.Add(packets(frame(9, "after a gap", false), frame(5, "fill", false)))
	f.Add(packets(frame(5, "overlap", false), frame(8, "lapping over", true)))
	f.Add(packets(append(frame(5, "two", false), frame(8, "frames", false)...)))
	f.Add(packets(frame(5, "0123456789012345678901234567890123456789012345678901234567890123456789", true)))
	f.Add(packets(frame(1<<40, "far ahead", false)))
	f.Fuzz(func(t *testing.T, in []byte) {
		n := newTestNet(t, 72, path100ms, nil)
		n.server.onEvent = func(now monotime.Time, ev Event) {
			if ev.Kind == EventStreamOpened {
				n.server.c.AcceptStream(ev.StreamID)
			}
		}
		establish(t, n)
		sid, err := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst)
		if err != nil || sid != id {
			t.Fatalf("open: %d, %v", sid, err)
		}
		if _, err := n.client.c.StreamWrite(id, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		n.sim.Wake(n.flow)
		n.runUntil(t, 5*time.Second, func() bool { return n.server.c.StreamReadable(id) == 5 })

		// What the client's frames carried at each offset (any of them:
		// which copy a receiver keeps, and whether a packet that fails
		// further on acts on its first frames, is not this test's matter).
		carried := map[uint64][]byte{0: {'h'}, 1: {'e'}, 2: {'l'}, 3: {'l'}, 4: {'o'}}
		var parser wire.Parser
		lent := make([]byte, 37) // an odd room, so that frames run past it
		var got []byte
		read := func() {
			taken := n.server.c.StreamReadInto(id, nil)
			if taken > len(lent) {
				t.Fatalf("a lend of %d bytes took %d", len(lent), taken)
			}
			got = append(got, lent[:taken]...)
			buf := make([]byte, 23)
			for {
				k, _, err := n.server.c.StreamRead(id, buf)
				got = append(got, buf[:k]...)
				if err != nil || k < len(buf) {
					break
				}
			}
			n.server.c.StreamReadInto(id, lent)
		}
		read()
		now := n.sim.Now()
		for i := 0; i < 4 && len(in) > 0 && !n.server.c.Closed(); i++ {
			size := min(int(in[0]), len(in)-1)
			p := in[1 : 1+size]
			in = in[1+size:]
			if len(p) == 0 {
				continue
			}
			for parser.Reset(p); parser.Next(); {
				if parser.Type() != wire.FrameStream {
					continue
				}
				if sf := parser.Stream(); sf.StreamID == id {
					for j, c := range sf.Data {
						o := sf.Offset + uint64(j)
						carried[o] = append(carried[o], c)
					}
				}
			}
			n.server.c.HandleDatagram(now, sealAs(n.client.c, p))
			for {
				if _, ok := n.server.c.PollEvent(); !ok {
					break
				}
			}
			read()
			n.server.c.PollTransmit(now, make([]byte, 1500))
			now += monotime.Time(1000)
		}
		for off, c := range got {
			if want := carried[uint64(off)]; !bytes.Contains(want, []byte{c}) {
				t.Fatalf("byte %d read as %q, the frames carried %q there", off, c, want)
			}
		}
		if err := n.server.c.Err(); err != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrPeerClosed) {
			t.Fatalf("closed with %v, want ErrProtocol", err)
		}
	})
}
