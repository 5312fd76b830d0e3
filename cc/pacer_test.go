package cc

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

func TestPacerRateAndBurst(t *testing.T) {
	tests := []struct {
		name    string
		rateBps uint64
		mss     int
	}{
		{"1Mbit", 1e6, 1350},
		{"250Mbit", 250e6, 1350},
		{"10Gbit", 10e9, 1350},
		{"333kbit-odd", 333_333, 1200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPacer(tc.mss)
			start := monotime.Time(time.Second)
			p.SetRate(start, tc.rateBps)
			burst := p.BurstBytes()
			wantBurst := max(2*tc.mss, int(bytesAtRate(tc.rateBps, 2*time.Millisecond)))
			if burst != min(wantBurst, maxPacerBurstBytes) {
				t.Fatalf("burst %d, want %d", burst, wantBurst)
			}
			// A greedy sender: send whenever allowed, else sleep until
			// NextSendTime. Count bytes released over one second.
			now := start
			end := start.Add(time.Second)
			var sent int64
			maxRun := 0 // bytes sent at one instant
			for now.Before(end) {
				run := 0
				for p.Budget(now) > 0 {
					p.OnSent(now, tc.mss)
					sent += int64(tc.mss)
					run += tc.mss
				}
				maxRun = max(maxRun, run)
				next := p.NextSendTime(now)
				if !next.After(now) {
					t.Fatalf("NextSendTime %v not after %v with no budget", next, now)
				}
				now = next
			}
			// Everything released: the initial burst plus rate × 1 s.
			want := float64(tc.rateBps)/8 + float64(burst)
			if got := float64(sent); got < want*0.999-float64(tc.mss) || got > want*1.001+float64(tc.mss) {
				t.Fatalf("released %d bytes in 1 s, want %.0f ±0.1%%", sent, want)
			}
			if maxRun > burst+tc.mss {
				t.Fatalf("burst of %d bytes, bound %d", maxRun, burst+tc.mss)
			}
		})
	}
}

func TestPacerIdleCapsAndUnpaced(t *testing.T) {
	p := NewPacer(1000)
	now := monotime.Time(time.Second)
	if p.Budget(now) <= 1<<40 || p.NextSendTime(now) != now {
		t.Fatal("a pacer without rate must be unpaced")
	}
	p.SetRate(now, 100e6) // 12.5 kB per ms
	for p.Budget(now) > 0 {
		p.OnSent(now, 1000)
	}
	// After a long idle period the credit is capped at one burst.
	now = now.Add(10 * time.Second)
	if got := p.Budget(now); got != p.BurstBytes() {
		t.Fatalf("budget after idle %d, want burst %d", got, p.BurstBytes())
	}
	// Rate change keeps the credit earned before it.
	for p.Budget(now) > 0 {
		p.OnSent(now, 1000)
	}
	// The wait covers the debt and the quantum (half a burst); both are
	// paid at the new rate, and the quantum follows the rate.
	wait := p.NextSendTime(now).Sub(now)
	debt := float64(wait)*100e6/8e9 - float64(p.BurstBytes()/2) // bytes
	p.SetRate(now, 50e6)
	want := time.Duration((debt + float64(p.BurstBytes()/2)) * 8e9 / 50e6)
	if got := p.NextSendTime(now).Sub(now); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Fatalf("wait after halving the rate %v, want %v", got, want)
	}
	p.SetRate(now, 0)
	if p.Budget(now) <= 1<<40 {
		t.Fatal("rate 0 must unpace")
	}
}

// TestPacerQuantum: a sender woken far more often than the pacer's
// quantum (by ACKs, say) still sends in batches of half a burst once
// the credit has run out, at the same long-run rate; a sender that never
// exhausts the credit is not held back by it.
func TestPacerQuantum(t *testing.T) {
	const mss = 1350
	p := NewPacer(mss)
	start := monotime.Time(time.Second)
	p.SetRate(start, 250e6) // burst 62,500 B, quantum 31,250 B
	quantum := p.BurstBytes() / 2
	now := start
	var sent, sends, batches int
	for now.Before(start.Add(time.Second)) {
		batch := 0
		for p.NextSendTime(now) == now {
			p.OnSent(now, mss)
			batch += mss
		}
		if batch > 0 {
			sent += batch
			sends++
			if sends > 1 { // the first is the initial burst
				batches++
				if batch < quantum {
					t.Fatalf("batch of %d bytes at %v, want at least the quantum %d", batch, now.Sub(start), quantum)
				}
			}
		}
		now = now.Add(50 * time.Microsecond) // an ACK every 50 µs
	}
	want := 250e6/8 + float64(p.BurstBytes())
	if got := float64(sent); got < want*0.99 || got > want*1.01+mss {
		t.Fatalf("released %d bytes in 1 s, want %.0f ±1%%", sent, want)
	}
	if max := 1000; batches > max { // at most one batch per millisecond
		t.Fatalf("%d batches in 1 s, want at most %d", batches, max)
	}

	// Credit that never ran out is spent packet by packet.
	q := NewPacer(mss)
	q.SetRate(start, 250e6)
	q.OnSent(start, 2*mss) // credit left: burst - 2 packets, above zero
	at := start.Add(time.Microsecond)
	q.OnSent(at, p.BurstBytes()-3*mss-quantum/2) // below the quantum, still positive
	if q.NextSendTime(at) != at {
		t.Fatal("positive credit that never ran out must allow a send")
	}
}
