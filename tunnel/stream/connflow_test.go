package stream

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// TestBudgetStalledReader runs one stalled and three fast readers on one
// connection whose budget is far below what the fast readers' windows would
// grow to. The stalled stream must keep its initial credit and no more, the
// fast ones must keep receiving, and the credit outstanding must stay within
// the budget plus the per-stream floors.
func TestBudgetStalledReader(t *testing.T) {
	const (
		rtt    = 100 * time.Millisecond
		budget = 8 << 20
		init   = 256 << 10
	)
	cf := newConn(t, Config{BudgetBytes: budget, InitialStreamWindow: init}, 0)
	streams := []*RecvStream{NewRecvStream(0, cf), NewRecvStream(4, cf), NewRecvStream(8, cf), NewRecvStream(12, cf)}
	sent := make([]uint64, len(streams))
	buf := make([]byte, 64<<10)
	now := monotime.Time(1)
	var prevFast uint64
	prev := make([]uint64, len(streams))
	for round := range 60 {
		_, connLimit := cf.RecvWindow()
		for i, r := range streams {
			_, limit := r.RecvWindow()
			for sent[i] < limit && cf.received < connLimit {
				n := min(limit-sent[i], uint64(len(buf)), connLimit-cf.received)
				if err := r.HandleFrame(sent[i], buf[:n], false); err != nil {
					t.Fatalf("round %d stream %d: %v", round, i, err)
				}
				sent[i] += n
			}
		}
		for step := range 8 {
			at := now.Add(rtt * time.Duration(step) / 8)
			for _, r := range streams[1:] {
				for r.Readable() > 0 {
					r.Read(buf)
				}
				r.ShouldSendMaxStreamData(at, rtt)
			}
			streams[0].ShouldSendMaxStreamData(at, rtt)
			cf.ShouldSendMaxData(at, rtt)
		}
		now = now.Add(rtt)

		var outstanding uint64
		for _, r := range streams {
			_, limit := r.RecvWindow()
			outstanding += limit - r.win.consumed
		}
		if outstanding != cf.Budget().Used() {
			t.Fatalf("round %d: credit outstanding %d, budget used %d: accounting broken", round, outstanding, cf.Budget().Used())
		}
		if outstanding > budget+uint64(len(streams))*init {
			t.Fatalf("round %d: credit outstanding %d beyond budget %d plus floors", round, outstanding, budget)
		}
		if _, limit := streams[0].RecvWindow(); limit != init {
			t.Fatalf("round %d: stalled stream's credit moved to %d", round, limit)
		}
		for i := 1; i < len(streams); i++ {
			if round > 1 && sent[i] <= prev[i] {
				t.Fatalf("round %d: fast stream %d stopped receiving", round, i)
			}
		}
		copy(prev, sent)
		fast := sent[1] + sent[2] + sent[3]
		if round > 0 && fast <= prevFast {
			t.Fatalf("round %d: fast streams stopped receiving", round)
		}
		prevFast = fast
	}
	// Three fast streams share about 8 MiB - 256 KiB of credit: about
	// 2.6 MiB each per 100 ms RTT. They must get at least the floor each
	// round and, together, use most of the budget.
	perRound := prevFast / 60
	if perRound < budget/2 {
		t.Fatalf("fast streams received %d bytes per RTT with a budget of %d", perRound, budget)
	}
	t.Logf("fast streams: %d bytes per RTT; budget used %d of %d", perRound, cf.Budget().Used(), budget)
}

// TestConnMaxData: the connection's credit follows the bytes that arrive,
// read or not (ConnFlow.release), so that bytes waiting in streams nobody
// reads do not stall the others; reads hand it back only once the unread
// bytes reach the cap (the Budget and the largest connection window).
func TestConnMaxData(t *testing.T) {
	const win = 1 << 20
	// Unread cap: BudgetBytes + MaxConnWindow = 3 windows.
	cf := newConn(t, Config{InitialConnWindow: win, MaxConnWindow: win, InitialStreamWindow: win, MaxStreamWindow: win, BudgetBytes: 2 * win}, 0)
	a, b, c, d := NewRecvStream(0, cf), NewRecvStream(4, cf), NewRecvStream(8, cf), NewRecvStream(12, cf)
	if err := a.HandleFrame(0, make([]byte, win/2), false); err != nil {
		t.Fatal(err)
	}
	if _, ok := cf.ShouldSendMaxData(1, 0); !ok {
		t.Fatal("no MAX_DATA after half the window arrived")
	}
	if err := b.HandleFrame(0, make([]byte, win/2), false); err != nil {
		t.Fatal(err)
	}
	if err := b.HandleFrame(win/2, []byte{0}, false); err != nil {
		t.Fatalf("byte within the credit of the bytes that arrived: %v", err)
	}
	// Nothing was read: a and b (a client that stopped reading) hold a
	// window's bytes, and c still gets a window of credit.
	m, ok := cf.ShouldSendMaxData(1, 0)
	if want := uint64(win + 1 + win); !ok || m != want {
		t.Fatalf("MAX_DATA = %d, %v with a window unread; want %d", m, ok, want)
	}
	if err := c.HandleFrame(0, make([]byte, win), false); err != nil {
		t.Fatalf("stream c beside unread streams: %v", err)
	}
	// Two windows unread: credit up to the cap of three, and no further.
	if m, ok := cf.ShouldSendMaxData(1, 0); !ok || m != 3*win {
		t.Fatalf("MAX_DATA = %d, %v with two windows unread; want %d", m, ok, 3*win)
	}
	if err := d.HandleFrame(0, make([]byte, win-1), false); err != nil {
		t.Fatalf("stream d within the cap: %v", err)
	}
	if m, ok := cf.ShouldSendMaxData(1, 0); ok {
		t.Fatalf("MAX_DATA = %d with three windows unread, at the cap", m)
	}
	if err := d.HandleFrame(win-1, []byte{0, 0}, false); err == nil {
		t.Fatal("bytes beyond the connection credit accepted")
	}
	// Reading hands the credit back.
	a.Read(make([]byte, win/2))
	if m, ok := cf.ShouldSendMaxData(1, 0); !ok || m != 3*win+win/2 {
		t.Fatalf("MAX_DATA = %d, %v after reading half a window at the cap; want %d", m, ok, 3*win+win/2)
	}
	if got := cf.RecvUnread(); got != 3*win-win/2 {
		t.Fatalf("RecvUnread = %d, want %d", got, 3*win-win/2)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"tiny chunks", Config{ChunkBytes: 100}, false},
		{"floor above buffer", Config{SendBufferBytes: 1000, MinSendBufferBytes: 2000}, false},
		{"max stream window below initial", Config{InitialStreamWindow: 2 << 20, MaxStreamWindow: 1 << 20}, false},
		{"max conn window below initial", Config{InitialConnWindow: 2 << 20, MaxConnWindow: 1 << 20}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate = %v", tt.name, err)
		}
	}
}
