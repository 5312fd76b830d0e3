package flow

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/tcptest"
)

func TestBudgetAdmit(t *testing.T) {
	b := NewBudget(3, 100, 1000)
	for i := range 3 {
		if !b.Admit() {
			t.Fatalf("flow %d refused with room for 3", i+1)
		}
	}
	if b.Admit() {
		t.Fatal("a fourth flow admitted with room for 3")
	}
	s := b.Stats()
	if s.Flows != 3 || s.FlowsRefused != 1 || s.UsedBytes() != 300 || s.LimitBytes() != 1300 {
		t.Fatalf("stats %+v (used %d, limit %d)", s, s.UsedBytes(), s.LimitBytes())
	}
	b.Leave()
	if !b.Admit() {
		t.Fatal("no room after a flow left")
	}
	var none *Budget
	if !none.Admit() {
		t.Fatal("a nil budget refused a flow")
	}
	none.Leave()
}

// resizing is a Relay's LAN end with buffers of its own, as a netstack
// connection has: it counts Grow and Shrink calls, and like the stack's
// connection never shrinks its receive buffer.
type resizing struct {
	*end
	grown  [2]atomic.Int32 // [0] writing, [1] reading
	shrunk atomic.Int32
}

func (r *resizing) GrowBytes(reading bool) int64 {
	if reading {
		return 100 << 10
	}
	return 200 << 10
}

func (r *resizing) Grow(reading bool) {
	if reading {
		r.grown[1].Add(1)
	} else {
		r.grown[0].Add(1)
	}
}

func (r *resizing) Shrink(reading bool) bool {
	if reading {
		return false
	}
	r.shrunk.Add(1)
	return true
}

// relayBudget moves 1 MiB each way through a Relay whose LAN end is a
// resizing end, under b, and checks the bytes.
func relayBudget(t *testing.T, b *Budget) *resizing {
	t.Helper()
	client, lanEnd := pair()
	wan, server := pair()
	lan := &resizing{end: lanEnd}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Relay(context.Background(), lan, wan, RelayOptions{Budget: b})
	}()
	up, down := tcptest.Payload(1, 1<<20), tcptest.Payload(2, 1<<20)
	gotUp, gotDown := readAll(server), readAll(client)
	go func() { client.Write(up); client.CloseWrite() }()
	go func() { server.Write(down); server.CloseWrite() }()
	if r := <-gotUp; r.err != nil || !bytes.Equal(r.b, up) {
		t.Fatalf("upload: %d bytes, err %v", len(r.b), r.err)
	}
	if r := <-gotDown; r.err != nil || !bytes.Equal(r.b, down) {
		t.Fatalf("download: %d bytes, err %v", len(r.b), r.err)
	}
	<-done
	return lan
}

// TestRelayGrants: a streaming flow takes a grant each way, growing its
// LAN end's buffers, and gives it back when it ends.
func TestRelayGrants(t *testing.T) {
	b := NewBudget(1, 1, 1<<20)
	lan := relayBudget(t, b)
	if lan.grown[1].Load() != 1 || lan.grown[0].Load() == 0 {
		t.Errorf("grown: reading %d, writing %d times; want 1 and at least 1", lan.grown[1].Load(), lan.grown[0].Load())
	}
	if s := b.Stats(); s.GrantedBytes != 0 || s.GrantsRefused != 0 || s.Grants < 2 {
		t.Errorf("after the flow: %+v, want grants taken each way, none held or refused", s)
	}
}

// TestRelayGrantRefused: with no room for grants the flow still moves
// every byte, at its small buffers, and nothing grows.
func TestRelayGrantRefused(t *testing.T) {
	b := NewBudget(1, 1, 0)
	lan := relayBudget(t, b)
	if lan.grown[0].Load()+lan.grown[1].Load() != 0 {
		t.Errorf("buffers grown without a grant")
	}
	if s := b.Stats(); s.GrantsRefused == 0 || s.GrantedBytes != 0 {
		t.Errorf("stats %+v: want refused grants and nothing granted", s)
	}
}

// TestGrantWaitsForSustainedReads: a direction reading from a Resizer
// asks for a grant only after growAfterBytes in a burst.
func TestGrantWaitsForSustainedReads(t *testing.T) {
	b := NewBudget(1, 1, 1<<20)
	r := &resizing{}
	g := newGrant(b, r, true)
	now := time.Unix(1, 0)
	g.clock = func() time.Time { return now }
	read := func(k int, after time.Duration) bool {
		now = now.Add(after)
		return g.wantsBig(k, smallBuf)
	}
	for range growAfterBytes/smallBuf - 1 {
		if read(smallBuf, time.Millisecond) {
			t.Fatal("asked for a grant before growAfterBytes")
		}
	}
	// A pause ends the burst: requests a while apart never add up.
	if read(smallBuf, 2*burstGap) {
		t.Fatal("asked for a grant after a pause")
	}
	for range growAfterBytes/1000 - 2 {
		read(1000, time.Millisecond) // short reads count too
	}
	if !read(1000, time.Millisecond) || !g.take() {
		t.Fatal("no grant after a burst of growAfterBytes")
	}
	if !g.held || r.grown[1].Load() != 1 || b.Stats().GrantedBytes != bigBuf+100<<10 {
		t.Fatalf("held %v, grown %d, granted %d", g.held, r.grown[1].Load(), b.Stats().GrantedBytes)
	}
	g.giveBack(false) // the receive buffer does not shrink: kept
	if !g.held {
		t.Fatal("a read grant given back while its buffer cannot shrink")
	}
	g.giveBack(true)
	if g.held || b.Stats().GrantedBytes != 0 {
		t.Fatal("forced give-back kept the grant")
	}
}
