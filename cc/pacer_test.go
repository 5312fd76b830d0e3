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

// TestPacerBurstFor: the burst is a 25th of the path's RTT, between 4.2
// and 8 ms.
func TestPacerBurstFor(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct{ rtt, want time.Duration }{
		{0, minGrownBurst}, {20 * ms, minGrownBurst}, {50 * ms, minGrownBurst}, {70 * ms, minGrownBurst},
		{100 * ms, minGrownBurst}, {150 * ms, 6 * ms},
		{200 * ms, 8 * ms}, {time.Second, 8 * ms},
	} {
		if got := PacerBurstFor(c.rtt); got != c.want {
			t.Errorf("PacerBurstFor(%v) = %v, want %v", c.rtt, got, c.want)
		}
	}
}

// TestPacerBurstTime: a longer burst time makes a greedy sender's wake-ups
// rarer (one per quantum, half the burst) without changing the long-run
// rate, and a shorter one takes effect at once, credit clipped.
func TestPacerBurstTime(t *testing.T) {
	const rate, mss = 50e6, 1350
	for _, burstTime := range []time.Duration{DefaultPacerBurst, 4 * time.Millisecond, 8 * time.Millisecond} {
		p := NewPacer(mss)
		start := monotime.Time(time.Second)
		p.SetBurstTime(start, burstTime)
		p.SetRate(start, rate)
		wantBurst := int(bytesAtRate(rate, burstTime))
		if burstTime > DefaultPacerBurst {
			wantBurst = max(int(bytesAtRate(rate, DefaultPacerBurst)), min(wantBurst, grownBurstPackets*mss))
		}
		if p.BurstBytes() != wantBurst {
			t.Fatalf("burst time %v: burst %d bytes, want %d", burstTime, p.BurstBytes(), wantBurst)
		}
		now, end := start, start.Add(time.Second)
		var sent int64
		wakeups := 0
		for now.Before(end) {
			for p.Budget(now) > 0 {
				p.OnSent(now, mss)
				sent += mss
			}
			now = p.NextSendTime(now)
			wakeups++
		}
		// Everything released but what waits for the next quantum.
		want := float64(rate)/8 + float64(p.BurstBytes())
		quantum := float64(p.BurstBytes()) / 2
		if got := float64(sent); got < want*0.999-quantum-mss || got > want*1.001+mss {
			t.Fatalf("burst time %v: released %d bytes in 1 s, want %.0f", burstTime, sent, want)
		}
		// One wake-up per quantum (half the burst); each also spends
		// the last packet's overdraft, so a little fewer.
		wantWakeups := float64(rate) / 8 / float64(p.BurstBytes()/2)
		if w := float64(wakeups); w < wantWakeups*0.85 || w > wantWakeups*1.01 {
			t.Fatalf("burst time %v: %d wake-ups in 1 s, want about %.0f", burstTime, wakeups, wantWakeups)
		}
	}

	// At 250 Mbit/s on a 200 ms path the burst grows to
	// grownBurstPackets; at 1 Gbit/s 2 ms already hold more, and a longer
	// burst time changes nothing.
	p := NewPacer(mss)
	start := monotime.Time(time.Second)
	p.SetBurstTime(start, PacerBurstFor(200*time.Millisecond))
	p.SetRate(start, 250e6)
	if got, want := p.BurstBytes(), grownBurstPackets*mss; got != want {
		t.Fatalf("burst at 250 Mbit/s with 8 ms asked: %d bytes, want %d packets: %d", got, grownBurstPackets, want)
	}
	p = NewPacer(mss)
	p.SetBurstTime(start, 8*time.Millisecond)
	p.SetRate(start, 1e9)
	if got, want := p.BurstBytes(), int(bytesAtRate(1e9, DefaultPacerBurst)); got != want {
		t.Fatalf("burst at 1 Gbit/s with 8 ms asked: %d bytes, want 2 ms: %d", got, want)
	}

	// Shortening the burst clips the credit at once.
	p = NewPacer(mss)
	p.SetBurstTime(start, 4*time.Millisecond)
	p.SetRate(start, rate)
	if got, want := p.Budget(start), min(int(bytesAtRate(rate, 4*time.Millisecond)), grownBurstPackets*mss); got != want {
		t.Fatalf("budget at start %d, want the grown burst %d", got, want)
	}
	p.SetBurstTime(start, 0) // back to the default
	if got, want := p.Budget(start), int(bytesAtRate(rate, DefaultPacerBurst)); got != want {
		t.Fatalf("budget after shortening %d, want %d", got, want)
	}
}
