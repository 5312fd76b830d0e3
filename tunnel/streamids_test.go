package tunnel

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/wanopt/wanopt/tunnel/wire"
)

func TestIDWindow(t *testing.T) {
	w := newIDWindow(4) // 256 indexes ahead of base
	for k := range uint64(1000) {
		if !w.add(k) {
			t.Fatalf("in-order index %d refused", k)
		}
	}
	if w.base != 960 || !w.contains(999) || w.contains(1000) {
		t.Fatalf("after 0..999: base %d, contains 999 %v, 1000 %v", w.base, w.contains(999), w.contains(1000))
	}
	// Opens that overtook a late one, even descending, cost nothing more.
	for k := uint64(1200); k > 1000; k-- {
		if !w.add(k) {
			t.Fatalf("index %d within the window refused", k)
		}
	}
	if w.contains(1000) || !w.contains(1001) || w.base != 960 {
		t.Fatalf("gap at 1000: contains %v, 1001 %v, base %d", w.contains(1000), w.contains(1001), w.base)
	}
	if w.add(960 + 256) {
		t.Error("an index a whole window ahead of the lowest unopened one was accepted")
	}
	w.add(1000) // the late one arrives: the window moves on
	if w.base != 1152 || !w.contains(1200) || w.contains(1201) {
		t.Errorf("after filling the gap: base %d, contains 1200 %v, 1201 %v", w.base, w.contains(1200), w.contains(1201))
	}
}

// TestStreamIDBeyondWindowCloses: a peer that opens a stream far beyond
// what it could have in flight is closed for breaking the stream limit;
// its descending opens within the window are served.
func TestStreamIDBeyondWindowCloses(t *testing.T) {
	n := newTestNet(t, 80, path100ms, nil)
	establish(t, n)
	now := n.sim.Now()
	open := func(id uint64) {
		f := wire.StreamOpenFrame{StreamID: id, Proto: wire.ProtoTCP,
			Src: netip.MustParseAddrPort("198.18.1.2:1000"), Dst: netip.MustParseAddrPort("198.18.2.2:80")}
		n.server.c.HandleDatagram(now, sealAs(n.client.c, f.Append(nil)))
	}
	for id := uint64(2 * 100); id > 0; id -= 2 { // descending client IDs
		open(id)
	}
	if n.server.c.Closed() {
		t.Fatalf("closed by descending opens within the window: %v", n.server.c.Err())
	}
	open(2 * uint64(n.server.c.peerSeen.span()+10))
	if err := n.server.c.Err(); !n.server.c.Closed() || !errors.Is(err, ErrProtocol) {
		t.Errorf("after an open beyond the window: closed %v, err %v; want ErrProtocol", n.server.c.Closed(), err)
	}
}
