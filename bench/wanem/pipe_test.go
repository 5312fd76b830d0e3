package wanem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// t0 is the fake clock's start; any non-zero instant would do.
const t0 = monotime.Time(1_000_000_000)

// packet returns a packet of size bytes (at least 8) carrying seq.
func packet(size int, seq uint64) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, seq)
	for i := 8; i < size; i++ {
		b[i] = byte(seq) + byte(i)
	}
	return b
}

func seqOf(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// out is a packet as it left the pipe.
type out struct {
	at   monotime.Time
	seq  uint64
	size int
	data []byte
}

// drainAll releases every packet in p, stepping the fake clock to each
// release time, and returns them in release order.
func drainAll(t *testing.T, p *Pipe) []out {
	t.Helper()
	var got []out
	for {
		at, ok := p.Next()
		if !ok {
			return got
		}
		if _, early := p.Dequeue(at - 1); early {
			t.Fatalf("Dequeue returned a packet 1 ns before its release time %d", at)
		}
		b, ok := p.Dequeue(at)
		if !ok {
			t.Fatalf("Next said %d but Dequeue at that time returned nothing", at)
		}
		got = append(got, out{at: at, seq: seqOf(b), size: len(b), data: bytes.Clone(b)})
		p.Release(b)
	}
}

// drainDue releases the packets due at now, appending them to got.
func drainDue(p *Pipe, now monotime.Time, got []out) []out {
	for {
		at, ok := p.Next()
		if !ok || at > now {
			return got
		}
		b, _ := p.Dequeue(now)
		got = append(got, out{at: at, seq: seqOf(b), size: len(b)})
		p.Release(b)
	}
}

func mustPipe(t testing.TB, cfg Config) *Pipe {
	t.Helper()
	p, err := NewPipe(cfg)
	if err != nil {
		t.Fatalf("NewPipe(%+v): %v", cfg, err)
	}
	return p
}

// txEnd returns t0 + floor(k*size*8e9/rate) computed in big integers: the
// departure of the k-th back-to-back packet (k from 1) by the formula.
func txEnd(k uint64, size int, rateBps uint64) monotime.Time {
	n := new(big.Int).SetUint64(k)
	n.Mul(n, big.NewInt(int64(size)*8e9))
	n.Quo(n, new(big.Int).SetUint64(rateBps))
	return t0 + monotime.Time(n.Int64())
}

func TestRateAndDelayExact(t *testing.T) {
	tests := []struct {
		rateBps uint64
		size    int
		n       int
		delay   time.Duration
	}{
		{100_000_000, 1500, 1000, 0},
		{100_000_000, 1500, 1000, 25 * time.Millisecond},
		{10_000_000, 64, 500, time.Millisecond},
		{1_000_000_000, 9000, 200, 600 * time.Millisecond},
		{7_777_777, 1337, 300, 3}, // fractional ns per packet
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dbps_%dB_%v", tc.rateBps, tc.size, tc.delay), func(t *testing.T) {
			p := mustPipe(t, Config{RateBps: tc.rateBps, Delay: tc.delay, QueueBytes: tc.n * tc.size})
			for i := range tc.n {
				p.Enqueue(t0, packet(tc.size, uint64(i)))
			}
			got := drainAll(t, p)
			if len(got) != tc.n {
				t.Fatalf("released %d packets, want %d", len(got), tc.n)
			}
			for i, o := range got {
				want := txEnd(uint64(i+1), tc.size, tc.rateBps).Add(tc.delay)
				if o.at != want || o.seq != uint64(i) {
					t.Fatalf("packet %d: released seq %d at %d, want seq %d at %d", i, o.seq, o.at, i, want)
				}
			}
			if tc.rateBps == 100_000_000 && tc.size == 1500 {
				// The spec's own figure: 120 µs apart, 120 ms in total.
				if d := got[1].at.Sub(got[0].at); d != 120*time.Microsecond {
					t.Errorf("spacing %v, want 120µs", d)
				}
				if d := got[len(got)-1].at.Sub(t0); d != 120*time.Millisecond+tc.delay {
					t.Errorf("last release after %v, want %v", d, 120*time.Millisecond+tc.delay)
				}
			}
		})
	}
}

func TestDelayExactWithoutRate(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			const delay = 20 * time.Millisecond
			p := mustPipe(t, Config{Delay: delay})
			now := t0
			var arrivals []monotime.Time
			for i := range 1000 {
				now = now.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
				arrivals = append(arrivals, now)
				p.Enqueue(now, packet(100+rng.IntN(1400), uint64(i)))
			}
			got := drainAll(t, p)
			for i, o := range got {
				if o.seq != uint64(i) || o.at != arrivals[i].Add(delay) {
					t.Fatalf("packet %d: seq %d released at %d, want %d", i, o.seq, o.at, arrivals[i].Add(delay))
				}
			}
		})
	}
}

func TestQueueDropTail(t *testing.T) {
	const size = 1500
	tests := []struct {
		name      string
		cfg       Config
		wantLimit int64
	}{
		{"bytes exact multiple", Config{RateBps: 100e6, QueueBytes: 150_000}, 150_000},
		{"bytes one short", Config{RateBps: 100e6, QueueBytes: 149_999}, 149_999},
		{"10ms at 100Mbit/s", Config{RateBps: 100e6, QueueDelay: 10 * time.Millisecond}, 125_000},
		{"1ms at 1Gbit/s", Config{RateBps: 1e9, QueueDelay: time.Millisecond}, 125_000},
		{"default", Config{RateBps: 250e6}, DefaultQueueBytes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPipe(t, tc.cfg)
			if got := p.QueueLimitBytes(); got != tc.wantLimit {
				t.Fatalf("QueueLimitBytes = %d, want %d", got, tc.wantLimit)
			}
			const burst = 3000
			for i := range burst {
				p.Enqueue(t0, packet(size, uint64(i)))
			}
			admitted := int(tc.wantLimit / size)
			c := p.Counters()
			if p.Len() != admitted || c.QueueDrops != uint64(burst-admitted) || c.QueueDropBytes != uint64((burst-admitted)*size) {
				t.Fatalf("held %d, drops %d (%d B); want held %d, drops %d", p.Len(), c.QueueDrops, c.QueueDropBytes, admitted, burst-admitted)
			}
			if c.QueueHighWaterBytes != int64(admitted*size) {
				t.Fatalf("high water %d, want %d", c.QueueHighWaterBytes, admitted*size)
			}
			// At the k-th departure exactly, k packets have left the queue
			// and k more fit.
			const k = 7
			at := txEnd(k, size, tc.cfg.RateBps)
			for i := range k + 3 {
				p.Enqueue(at, packet(size, uint64(burst+i)))
			}
			if c2 := p.Counters(); c2.QueueDrops != c.QueueDrops+3 || c2.QueueHighWaterBytes != c.QueueHighWaterBytes {
				t.Fatalf("after %d departures: drops %d (want %d), high water %d (want %d)",
					k, c2.QueueDrops, c.QueueDrops+3, c2.QueueHighWaterBytes, c.QueueHighWaterBytes)
			}
		})
	}
}

func TestQueueDelayConversion(t *testing.T) {
	tests := []struct {
		delay   time.Duration
		rateBps uint64
	}{
		{10 * time.Millisecond, 100e6},
		{3 * time.Millisecond, 333_333_333},
		{600 * time.Millisecond, 10e9},
		{time.Second, 1 << 60},
		{7 * time.Millisecond, 2_000_001},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v_%dbps", tc.delay, tc.rateBps), func(t *testing.T) {
			want := new(big.Int).SetInt64(int64(tc.delay))
			want.Mul(want, new(big.Int).SetUint64(tc.rateBps))
			want.Quo(want, big.NewInt(8e9))
			p := mustPipe(t, Config{RateBps: tc.rateBps, QueueDelay: tc.delay})
			if got := p.QueueLimitBytes(); got != want.Int64() {
				t.Fatalf("QueueLimitBytes = %d, want %s", got, want)
			}
		})
	}
}

func TestNoDriftOverAMillionPackets(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	tests := []struct {
		rateBps uint64
		size    int
		n       int
	}{
		{1_000_000_000, 1500, n / 10}, // 8 ns per byte: no fraction to carry
		{999_999_937, 1500, n},        // 12000.00075… ns per packet
		{1_000_000_000 / 3, 1499, n / 10},
	}
	for _, tc := range tests {
		n := tc.n
		t.Run(fmt.Sprintf("%dbps_%dB_%dpkts", tc.rateBps, tc.size, n), func(t *testing.T) {
			p := mustPipe(t, Config{RateBps: tc.rateBps})
			// Arrivals 1 ns faster than the link keep it busy throughout
			// while the backlog stays small.
			perPkt := time.Duration(uint64(tc.size)*8e9/tc.rateBps) - 1
			pkt := packet(tc.size, 0)
			var k uint64
			check := func(now monotime.Time) {
				for {
					at, ok := p.Next()
					if !ok || at > now {
						return
					}
					k++
					if want := txEnd(k, tc.size, tc.rateBps); at != want {
						t.Fatalf("packet %d departs at %d, want %d (off by %v)", k, at, want, at.Sub(want))
					}
					b, _ := p.Dequeue(now)
					p.Release(b)
				}
			}
			now := t0
			for range n {
				p.Enqueue(now, pkt)
				check(now)
				now = now.Add(perPkt)
			}
			check(monotime.Time(math.MaxInt64))
			if k != uint64(n) {
				t.Fatalf("released %d packets, want %d", k, n)
			}
		})
	}
}

func TestJitterNeverReorders(t *testing.T) {
	const delay, jitter = 10 * time.Millisecond, 5 * time.Millisecond
	tests := []struct {
		name    string
		spacing time.Duration
		rateBps uint64
	}{
		{"sparse", 10 * time.Millisecond, 0},
		{"dense", 100 * time.Microsecond, 0},
		{"dense rate-limited", 10 * time.Microsecond, 100e6},
	}
	for _, tc := range tests {
		for _, seed := range []int64{1, 42} {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				cfg := Config{Delay: delay, Jitter: jitter, RateBps: tc.rateBps, Seed: seed}
				if tc.rateBps > 0 {
					cfg.QueueBytes = 10 << 20
				}
				p := mustPipe(t, cfg)
				const n = 5000
				for i := range n {
					p.Enqueue(t0.Add(time.Duration(i)*tc.spacing), packet(1000, uint64(i)))
				}
				got := drainAll(t, p)
				if len(got) != n {
					t.Fatalf("released %d, want %d", len(got), n)
				}
				var sumExtra time.Duration
				for i, o := range got {
					if o.seq != uint64(i) {
						t.Fatalf("position %d holds seq %d: jitter reordered packets", i, o.seq)
					}
					if i > 0 && o.at < got[i-1].at {
						t.Fatalf("packet %d released at %d, before packet %d at %d", i, o.at, i-1, got[i-1].at)
					}
					extra := o.at.Sub(t0.Add(time.Duration(i) * tc.spacing).Add(delay))
					if extra < 0 {
						t.Fatalf("packet %d released %v before its delay", i, -extra)
					}
					sumExtra += extra
				}
				if tc.name == "sparse" {
					// Packets farther apart than the jitter are never held
					// back by their predecessor: extra is uniform in
					// [0, jitter], mean jitter/2, sd jitter/sqrt(12).
					mean := sumExtra / n
					se := time.Duration(float64(jitter) / math.Sqrt(12*n))
					if d := mean - jitter/2; d > 5*se || d < -5*se {
						t.Fatalf("mean jitter %v, want %v ± %v", mean, jitter/2, 5*se)
					}
					if max := maxExtra(got, t0, tc.spacing, delay); max > jitter {
						t.Fatalf("extra delay %v above Jitter %v", max, jitter)
					}
				} else if sumExtra == 0 {
					t.Fatal("jitter added no delay at all")
				}
			})
		}
	}
}

func maxExtra(got []out, start monotime.Time, spacing, delay time.Duration) time.Duration {
	var m time.Duration
	for i, o := range got {
		m = max(m, o.at.Sub(start.Add(time.Duration(i)*spacing).Add(delay)))
	}
	return m
}

// withinBinomial fails t unless got is within 5 sd of n trials at chance p.
func withinBinomial(t *testing.T, what string, got uint64, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-mean) > 5*sd+1e-9 {
		t.Fatalf("%s: %d of %d, want %.0f ± %.0f", what, got, n, mean, 5*sd)
	}
}

func TestRandomLoss(t *testing.T) {
	const n = 100_000
	for i, pct := range []float64{0, 0.1, 1, 5, 50, 100} {
		for _, seed := range []int64{int64(i) + 1} {
			t.Run(fmt.Sprintf("%v%%/seed=%d", pct, seed), func(t *testing.T) {
				p := mustPipe(t, Config{LossPct: pct, Seed: seed})
				pkt := packet(100, 0)
				for i := range n {
					p.Enqueue(t0.Add(time.Duration(i)), pkt)
				}
				got := drainAll(t, p)
				c := p.Counters()
				if c.Lost+uint64(len(got)) != n || c.Packets != uint64(len(got)) || c.Bytes != 100*c.Packets {
					t.Fatalf("lost %d + released %d (counted %d, %d B) != %d sent", c.Lost, len(got), c.Packets, c.Bytes, n)
				}
				withinBinomial(t, "lost", c.Lost, n, pct/100)
			})
		}
	}
}

func TestBurstLoss(t *testing.T) {
	const n = 200_000
	tests := []GilbertElliott{
		{PGoodToBad: 0.01, PBadToGood: 0.25, LossInBad: 1},
		{PGoodToBad: 0.01, PBadToGood: 0.5, LossInBad: 1},
		{PGoodToBad: 0.05, PBadToGood: 0.1, LossInBad: 1},
	}
	for i, ge := range tests {
		for _, seed := range []int64{int64(3 + i)} {
			t.Run(fmt.Sprintf("%+v/seed=%d", ge, seed), func(t *testing.T) {
				p := mustPipe(t, Config{BurstLoss: &ge, Seed: seed})
				pkt := make([]byte, 8)
				for i := range n {
					binary.BigEndian.PutUint64(pkt, uint64(i))
					p.Enqueue(t0.Add(time.Duration(i)), pkt)
				}
				got := drainAll(t, p)
				// Loss bursts are the gaps in the sequence numbers.
				var bursts, lost int
				next := uint64(0)
				for _, o := range append(got, out{seq: n}) {
					if o.seq > next {
						bursts++
						lost += int(o.seq - next)
					}
					next = o.seq + 1
				}
				if c := p.Counters(); c.BurstLost != uint64(lost) || c.Lost != 0 {
					t.Fatalf("counted %d burst losses (%d random), gaps show %d", c.BurstLost, c.Lost, lost)
				}
				meanBurst := float64(lost) / float64(bursts)
				wantBurst := 1 / ge.PBadToGood
				if math.Abs(meanBurst-wantBurst) > 0.1*wantBurst {
					t.Fatalf("mean burst %.2f packets (%d bursts), want %.2f ± 10%%", meanBurst, bursts, wantBurst)
				}
				rate := float64(lost) / n
				wantRate := ge.PGoodToBad / (ge.PGoodToBad + ge.PBadToGood)
				if math.Abs(rate-wantRate) > 0.15*wantRate {
					t.Fatalf("loss rate %.4f, want %.4f ± 15%%", rate, wantRate)
				}
			})
		}
	}
}

func TestReorder(t *testing.T) {
	const n = 20_000
	for _, pct := range []float64{0, 1, 10, 30} {
		for _, seed := range []int64{5, 6} {
			t.Run(fmt.Sprintf("%v%%/seed=%d", pct, seed), func(t *testing.T) {
				p := mustPipe(t, Config{ReorderPct: pct, ReorderDelay: time.Millisecond, Delay: 5 * time.Millisecond, Seed: seed})
				for i := range n {
					p.Enqueue(t0.Add(time.Duration(i)*10*time.Microsecond), packet(200, uint64(i)))
				}
				got := drainAll(t, p)
				if len(got) != n {
					t.Fatalf("released %d, want %d", len(got), n)
				}
				// A packet is reordered if a packet sent after it came out
				// before it.
				var late uint64
				var maxSeq uint64
				for i, o := range got {
					if i > 0 && o.seq < maxSeq {
						late++
					}
					maxSeq = max(maxSeq, o.seq)
				}
				// Held packets among the last ReorderDelay of traffic
				// (100 packets) may have nobody left to overtake them.
				if c := p.Counters(); c.Reordered < late || c.Reordered > late+100 {
					t.Fatalf("counted %d reordered, observed %d", c.Reordered, late)
				}
				withinBinomial(t, "reordered", late, n, pct/100)
			})
		}
	}
}

func TestDuplicate(t *testing.T) {
	const n = 20_000
	for _, pct := range []float64{0, 2, 25, 100} {
		t.Run(fmt.Sprintf("%v%%", pct), func(t *testing.T) {
			p := mustPipe(t, Config{DupPct: pct, Delay: time.Millisecond, RateBps: 1e9, Seed: 11})
			for i := range n {
				p.Enqueue(t0.Add(time.Duration(i)*20*time.Microsecond), packet(500, uint64(i)))
			}
			got := drainAll(t, p)
			c := p.Counters()
			if uint64(len(got)) != n+c.Duplicated || c.Packets != uint64(len(got)) {
				t.Fatalf("released %d (counted %d), want %d + %d duplicates", len(got), c.Packets, n, c.Duplicated)
			}
			withinBinomial(t, "duplicated", c.Duplicated, n, pct/100)
			var dups uint64
			for i := 1; i < len(got); i++ {
				if got[i].seq == got[i-1].seq {
					dups++
					if got[i].at != got[i-1].at || !bytes.Equal(got[i].data, got[i-1].data) {
						t.Fatalf("duplicate of seq %d differs from the original (time or contents)", got[i].seq)
					}
				} else if got[i].seq != got[i-1].seq+1 {
					t.Fatalf("seq %d follows %d", got[i].seq, got[i-1].seq)
				}
			}
			if dups != c.Duplicated {
				t.Fatalf("saw %d adjacent duplicates, counted %d", dups, c.Duplicated)
			}
		})
	}
}

func TestCountersAddUp(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := Config{
				Delay: 30 * time.Millisecond, Jitter: time.Millisecond, LossPct: 2,
				BurstLoss:  &GilbertElliott{PGoodToBad: 0.01, PBadToGood: 0.3, LossInBad: 0.8, LossInGood: 0.001},
				ReorderPct: 3, DupPct: 1, RateBps: 50e6, QueueBytes: 60_000, Seed: seed,
			}
			p := mustPipe(t, cfg)
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			const n = 30_000
			var sentBytes uint64
			var got []out
			now := t0
			for i := range n {
				size := 40 + rng.IntN(1461)
				sentBytes += uint64(size)
				p.Enqueue(now, packet(max(size, 8), uint64(i)))
				got = drainDue(p, now, got)
				now = now.Add(time.Duration(rng.Int64N(int64(200 * time.Microsecond))))
			}
			got = append(got, drainAll(t, p)...)
			c := p.Counters()
			if in := c.Lost + c.BurstLost + c.QueueDrops + c.Packets - c.Duplicated; in != n {
				t.Fatalf("lost %d + burst %d + queue %d + released %d - dup %d = %d, want %d", c.Lost, c.BurstLost, c.QueueDrops, c.Packets, c.Duplicated, in, n)
			}
			if c.Packets != uint64(len(got)) || c.QueueDrops == 0 || c.Reordered == 0 || c.Duplicated == 0 || c.Lost == 0 || c.BurstLost == 0 {
				t.Fatalf("some impairment never happened or miscounted: %+v (released %d)", c, len(got))
			}
			if c.QueueHighWaterBytes > p.QueueLimitBytes() || c.QueueHighWaterBytes < p.QueueLimitBytes()-MaxPacketBytes {
				t.Fatalf("high water %d, limit %d", c.QueueHighWaterBytes, p.QueueLimitBytes())
			}
			// Packets were dequeued at the next arrival, at most 200 µs late.
			if c.Lateness.Max >= 200*time.Microsecond || c.Lateness.Count() != c.Packets {
				t.Fatalf("lateness %+v, want below 200µs for all %d packets", c.Lateness, c.Packets)
			}
		})
	}
}

func TestSameSeedSameLossesWhateverElseIsOn(t *testing.T) {
	lossPattern := func(cfg Config) []uint64 {
		p := mustPipe(t, cfg)
		for i := range 5000 {
			p.Enqueue(t0.Add(time.Duration(i)*time.Millisecond), packet(100, uint64(i)))
		}
		var seqs []uint64
		for _, o := range drainAll(t, p) {
			seqs = append(seqs, o.seq)
		}
		return seqs
	}
	base := lossPattern(Config{LossPct: 10, Seed: 77})
	withMore := lossPattern(Config{LossPct: 10, Seed: 77, Jitter: 500 * time.Microsecond, DupPct: 5})
	var dedup []uint64
	for i, s := range withMore {
		if i == 0 || s != withMore[i-1] {
			dedup = append(dedup, s)
		}
	}
	if fmt.Sprint(base) != fmt.Sprint(dedup) {
		t.Fatal("enabling jitter and duplication changed which packets were lost")
	}
	if other := lossPattern(Config{LossPct: 10, Seed: 78}); fmt.Sprint(other) == fmt.Sprint(base) {
		t.Fatal("seeds 77 and 78 lost the same packets")
	}
}

func TestOwnershipAndEdgeCases(t *testing.T) {
	p := mustPipe(t, Config{Delay: time.Millisecond})
	pkt := packet(64, 1)
	p.Enqueue(t0, pkt)
	pkt[8] ^= 0xff // the caller may reuse its buffer at once
	p.Enqueue(t0, nil)
	p.Enqueue(t0, make([]byte, MaxPacketBytes+1))
	p.Enqueue(t0-5, packet(MaxPacketBytes, 2)) // time going back counts as t0
	if c := p.Counters(); c.Invalid != 2 {
		t.Fatalf("Invalid = %d, want 2", c.Invalid)
	}
	got := drainAll(t, p)
	if len(got) != 2 || !bytes.Equal(got[0].data, packet(64, 1)) || got[1].size != MaxPacketBytes {
		t.Fatalf("got %d packets, first intact: %v", len(got), len(got) > 0 && bytes.Equal(got[0].data, packet(64, 1)))
	}
	if got[0].at != t0.Add(time.Millisecond) || got[1].at != got[0].at {
		t.Fatalf("released at %d and %d, want both %d", got[0].at, got[1].at, t0.Add(time.Millisecond))
	}
	p.Release(make([]byte, 10, 1000)) // foreign buffers are ignored
	if _, ok := p.Next(); ok {
		t.Fatal("empty pipe has a next release")
	}
	// Late dequeue records lateness.
	p.Enqueue(t0, packet(64, 3))
	if _, ok := p.Dequeue(t0.Add(time.Millisecond + 300*time.Microsecond)); !ok {
		t.Fatal("due packet not dequeued")
	}
	if l := p.Counters().Lateness; l.Max != 300*time.Microsecond || l.Buckets[9] != 1 {
		t.Fatalf("lateness %+v, want max 300µs in bucket 9 [256µs, 512µs)", l)
	}
}

func TestLatenessQuantile(t *testing.T) {
	var l Lateness
	for i := range 1000 {
		l.record(time.Duration(i) * time.Microsecond) // 0 … 999 µs
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.001, time.Microsecond},       // sample 0 µs, bucket [0,1µs)
		{0.5, 512 * time.Microsecond},   // 499 µs, bucket [256,512)
		{0.99, 999 * time.Microsecond},  // 989 µs, bucket [512,1024) capped by max
		{1, 999 * time.Microsecond},     //
		{0.25, 256 * time.Microsecond},  // 249 µs
		{0.002, 2 * time.Microsecond},   // 1 µs, bucket [1,2)
		{0.128, 128 * time.Microsecond}, // 127 µs, bucket [64,128)
	}
	for _, tc := range tests {
		if got := l.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	var empty Lateness
	if empty.Quantile(0.99) != 0 {
		t.Error("empty histogram has a quantile")
	}
	l.record(time.Hour)
	if l.Buckets[LatenessBuckets-1] != 1 || l.Max != time.Hour {
		t.Errorf("an hour late landed in %v, max %v", l.Buckets, l.Max)
	}
}

func BenchmarkPipe(b *testing.B) {
	cfg := Config{
		Delay: 20 * time.Millisecond, Jitter: 100 * time.Microsecond, LossPct: 0.5,
		ReorderPct: 0.5, DupPct: 0.5, RateBps: 1e9, Seed: 1,
	}
	p := mustPipe(b, cfg)
	pkt := packet(1500, 0)
	now := t0
	step := 12 * time.Microsecond
	run := func(n int) {
		for range n {
			p.Enqueue(now, pkt)
			for {
				buf, ok := p.Dequeue(now)
				if !ok {
					break
				}
				p.Release(buf)
			}
			now = now.Add(step)
		}
	}
	run(100_000) // fill the delay line and the pools
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	b.ResetTimer()
	run(b.N)
}

func TestPreemptible(t *testing.T) {
	p := mustPipe(t, Config{ReorderPct: 100, ReorderDelay: 5 * time.Millisecond, Delay: time.Millisecond})
	if p.Preemptible() {
		t.Fatal("empty pipe is preemptible")
	}
	p.Enqueue(t0, packet(64, 0)) // held: due at t0+6ms
	if !p.Preemptible() {
		t.Fatal("pipe holding only a reordered packet is not preemptible")
	}
	if at, _ := p.Next(); at != t0.Add(6*time.Millisecond) {
		t.Fatalf("Next = %d, want t0+6ms", at)
	}
	// A packet that is not reordered, sent later, is due earlier: exactly
	// the case Preemptible warns about.
	q := mustPipe(t, Config{Delay: time.Millisecond})
	q.Enqueue(t0, packet(64, 0))
	if q.Preemptible() {
		t.Fatal("pipe with an in-order packet is preemptible")
	}
}

// TestOutage: while the pipe is down arriving packets are dropped and counted,
// those inside leave on time, and nothing lingers in the queue or rate.
func TestOutage(t *testing.T) {
	cfg := Config{Delay: 10 * time.Millisecond, RateBps: 8e6} // 1 byte per µs
	p := mustPipe(t, cfg)
	p.Enqueue(t0, packet(1000, 0)) // in the pipe before the outage
	p.SetDown(true)
	if !p.Down() {
		t.Fatal("Down() = false after SetDown(true)")
	}
	for i := range 9 {
		p.Enqueue(t0.Add(time.Duration(i)*time.Microsecond), packet(1000, uint64(1+i)))
	}
	if c := p.Counters(); c.OutageDrops != 9 || c.QueueDrops != 0 || c.Lost != 0 {
		t.Fatalf("counters while down: %+v; want 9 outage drops and nothing else", c)
	}
	up := t0.Add(20 * time.Millisecond)
	got := drainDue(p, up, nil)
	if len(got) != 1 || got[0].seq != 0 || got[0].at != t0.Add(time.Millisecond+10*time.Millisecond) {
		t.Fatalf("released during the outage %+v; want only packet 0 at t0+11ms", got)
	}
	p.SetDown(false)
	p.Enqueue(up, packet(1000, 10))
	got = drainAll(t, p)
	// The dropped packets took no share of the rate: the link is idle, so
	// packet 10 departs 1 ms (its transmit time) after it arrives.
	if len(got) != 1 || got[0].seq != 10 || got[0].at != up.Add(11*time.Millisecond) {
		t.Fatalf("after the outage released %+v; want packet 10 at up+11ms", got)
	}
	if c := p.Counters(); c.Packets != 2 || c.OutageDrops != 9 {
		t.Fatalf("counters at the end: %+v; want 2 released, 9 outage drops", c)
	}
}

// TestOutageDrawsNoRandomness: packets dropped by an outage do not shift
// the random losses of the packets after it.
func TestOutageDrawsNoRandomness(t *testing.T) {
	cfg := Config{LossPct: 30, Seed: 5}
	withOutage, without := mustPipe(t, cfg), mustPipe(t, cfg)
	for i := range 100 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		withOutage.SetDown(i >= 40 && i < 60)
		withOutage.Enqueue(at, packet(100, uint64(i)))
		if i < 40 || i >= 60 {
			without.Enqueue(at, packet(100, uint64(i)))
		}
	}
	a, b := drainAll(t, withOutage), drainAll(t, without)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("released %d with the outage, %d without; want the same, not 0", len(a), len(b))
	}
	for i := range a {
		if a[i].seq != b[i].seq {
			t.Fatalf("release %d: seq %d with the outage, %d without", i, a[i].seq, b[i].seq)
		}
	}
	if c := withOutage.Counters(); c.OutageDrops != 20 {
		t.Fatalf("OutageDrops = %d, want 20", c.OutageDrops)
	}
}

// ipPacket returns a zeroed packet of size bytes with an IP version.
func ipPacket(version, size int) []byte {
	b := make([]byte, size)
	b[0] = byte(version << 4)
	return b
}

// TestMTU: packets larger than the MTU are dropped and counted; SetMTU
// applies to later packets and refuses values it cannot emulate.
func TestMTU(t *testing.T) {
	p := mustPipe(t, Config{MTU: 1280, Delay: time.Millisecond})
	if p.MTU() != 1280 {
		t.Fatalf("MTU() = %d, want 1280", p.MTU())
	}
	for i, size := range []int{1280, 1281, 1500, 100} {
		p.Enqueue(t0.Add(time.Duration(i)), packet(size, uint64(i)))
	}
	got := drainAll(t, p)
	if len(got) != 2 || got[0].seq != 0 || got[1].seq != 3 {
		t.Fatalf("released %+v; want packets 0 (1280 bytes) and 3 (100 bytes)", got)
	}
	if c := p.Counters(); c.MTUDrops != 2 || c.Packets != 2 {
		t.Fatalf("counters %+v; want 2 MTU drops, 2 released", c)
	}
	if err := p.SetMTU(1500); err != nil {
		t.Fatal(err)
	}
	p.Enqueue(t0.Add(time.Second), packet(1500, 10))
	p.Enqueue(t0.Add(time.Second), packet(1501, 11))
	got = drainAll(t, p)
	if len(got) != 1 || got[0].seq != 10 {
		t.Fatalf("after SetMTU(1500) released %+v; want packet 10 only", got)
	}
	for _, bad := range []int{-1, 67, MaxPacketBytes + 1} {
		if err := p.SetMTU(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SetMTU(%d) = %v, want ErrInvalidConfig", bad, err)
		}
	}
	if p.MTU() != 1500 {
		t.Errorf("a refused SetMTU changed the MTU to %d", p.MTU())
	}
	if err := p.SetMTU(0); err != nil || p.MTU() != 0 {
		t.Fatalf("SetMTU(0) = %v, MTU %d; want no limit", err, p.MTU())
	}
	p.Enqueue(t0.Add(2*time.Second), packet(9000, 12))
	if got := drainAll(t, p); len(got) != 1 {
		t.Fatalf("with no MTU a 9000-byte packet was not released: %+v", got)
	}
	if _, err := NewPipe(Config{MTU: 20}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewPipe with MTU 20: %v, want ErrInvalidConfig", err)
	}
}

// TestFragmentsCounted: IPv4 and IPv6 fragments are counted, also when
// dropped; whole packets (DF set or not) are not.
func TestFragmentsCounted(t *testing.T) {
	p := mustPipe(t, Config{MTU: 1000})
	v4 := func(flagsOff uint16) []byte {
		b := ipPacket(4, 600)
		binary.BigEndian.PutUint16(b[6:], flagsOff)
		return b
	}
	v6 := func(next byte) []byte {
		b := ipPacket(6, 600)
		b[6] = next
		return b
	}
	p.Enqueue(t0, v4(0x4000)) // DF: whole
	p.Enqueue(t0, v4(0))      // whole
	p.Enqueue(t0, v4(0x2000)) // MF, offset 0: first fragment
	p.Enqueue(t0, v4(0x00b9)) // last fragment
	p.Enqueue(t0, v6(17))     // UDP: whole
	p.Enqueue(t0, v6(44))     // fragment header
	big := ipPacket(4, 1200)
	binary.BigEndian.PutUint16(big[6:], 0x2000)
	p.Enqueue(t0, big) // a fragment over the MTU: counted, then dropped
	if c := p.Counters(); c.Fragments != 4 || c.MTUDrops != 1 {
		t.Fatalf("counters %+v; want 4 fragments, 1 MTU drop", c)
	}
}

// DequeueEarly releases a packet due within its bound, not one due after
// it, keeps the order, and records how early in EarlyMax.
func TestDequeueEarly(t *testing.T) {
	// At 8 Mbit/s a 1500-byte packet takes 1.5 ms: the first is released
	// at t0 + 1.5 ms + 1 ms, the second at t0 + 3 ms + 1 ms.
	p := mustPipe(t, Config{Delay: time.Millisecond, RateBps: 8_000_000})
	p.Enqueue(t0, packet(1500, 1))
	p.Enqueue(t0, packet(1500, 2))
	due := t0.Add(2500 * time.Microsecond)
	if _, ok := p.DequeueEarly(due.Add(-51*time.Microsecond), 50*time.Microsecond); ok {
		t.Fatal("a packet due 51 µs later was released with a bound of 50 µs")
	}
	pkt, ok := p.DequeueEarly(due.Add(-50*time.Microsecond), 50*time.Microsecond)
	if !ok || !bytes.Equal(pkt, packet(1500, 1)) {
		t.Fatalf("the packet due in 50 µs: ok %v, first packet %v", ok, ok && bytes.Equal(pkt, packet(1500, 1)))
	}
	// The second is 1.5 ms later still: not due, even early.
	if _, ok := p.DequeueEarly(due, 50*time.Microsecond); ok {
		t.Fatal("the second packet was released 1.5 ms early")
	}
	c := p.Counters()
	if c.EarlyMax != 50*time.Microsecond || c.Lateness.Max != 0 || c.Lateness.Buckets[0] != 1 {
		t.Fatalf("EarlyMax %v, lateness %+v; want 50µs and one on-time release", c.EarlyMax, c.Lateness)
	}
	if _, ok := p.Dequeue(t0.Add(4 * time.Millisecond)); !ok {
		t.Fatal("the second packet was not released at its time")
	}
	if c := p.Counters(); c.EarlyMax != 50*time.Microsecond || c.Packets != 2 {
		t.Fatalf("after an on-time release: EarlyMax %v, packets %d; want 50µs, 2", c.EarlyMax, c.Packets)
	}
}
