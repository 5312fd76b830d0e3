package stream

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// netEvent is something in flight between the two halves of a stream.
type netEvent struct {
	at   int // tick of delivery
	kind int
	f    frame
	max  uint64
}

const (
	evData          = iota // STREAM frame to the receiver (and its fate back to the sender)
	evAck                  // the frame was acknowledged
	evLost                 // the frame was declared lost
	evMaxStreamData        // MAX_STREAM_DATA to the sender
	evMaxData              // MAX_DATA to the sender
)

// TestRoundTrip sends a random byte stream from a SendStream to a
// RecvStream over a simulated path that drops, duplicates and reorders
// frames, reports some losses spuriously (acked later), and delays credit
// updates. The receiver must deliver exactly the bytes written, the sender
// must never exceed the receiver's credit (HandleFrame never fails), and both
// sides must end Done with their memory returned.
func TestRoundTrip(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		roundTrip(t, seed)
	}
}

func roundTrip(t *testing.T, seed uint64) {
	rng := newRand(t, seed)
	cfg := Config{
		ChunkBytes:          1024 * (1 + rng.IntN(8)),
		SendBufferBytes:     64 << 10,
		MinSendBufferBytes:  16 << 10,
		InitialStreamWindow: 16 << 10,
		MaxStreamWindow:     256 << 10,
		InitialConnWindow:   24 << 10,
		MaxConnWindow:       512 << 10,
		BudgetBytes:         1 << 20,
	}
	cfS, cfR := newConn(t, cfg, cfg.InitialConnWindow), newConn(t, cfg, cfg.InitialConnWindow)
	s, r := NewSendStream(2, cfS, cfg.InitialStreamWindow), NewRecvStream(2, cfR)

	src := randBytes(rng, rng.IntN(400_000))
	var (
		written int
		got     []byte
		fin     bool
		net     []netEvent
		readBuf = make([]byte, 8192)
	)
	const rtt = 20 * time.Millisecond // ticks are 1 ms; one-way delay 5-15 ms
	delay := func(tick int) int { return tick + 5 + rng.IntN(11) }
	for tick := 0; !(fin && s.Done()); tick++ {
		if tick > 200_000 {
			t.Fatalf("seed %d: no progress: written %d of %d, received %d, fin %v, sender done %v",
				seed, written, len(src), len(got), fin, s.Done())
		}
		now := monotime.Time(1 + int64(tick)*int64(time.Millisecond))

		// The application writes what the buffer takes.
		if written < len(src) {
			written += s.Write(src[written:min(len(src), written+1+rng.IntN(20000))])
			if written == len(src) {
				s.CloseWrite()
			}
		}
		// The connection sends a few packets.
		for range rng.IntN(8) {
			f, ok := pop(s, rng.IntN(1400))
			if !ok {
				break
			}
			net = append(net, netEvent{at: delay(tick), kind: evData, f: f})
			if rng.IntN(20) == 0 { // duplicated on the path
				net = append(net, netEvent{at: delay(tick), kind: evData, f: f})
			}
		}
		s.Blocked()

		// Deliver what is due, in random order.
		rng.Shuffle(len(net), func(i, j int) { net[i], net[j] = net[j], net[i] })
		rest := net[:0]
		var due []netEvent
		for _, e := range net {
			if e.at <= tick {
				due = append(due, e)
			} else {
				rest = append(rest, e)
			}
		}
		net = rest
		for _, e := range due {
			switch e.kind {
			case evData:
				switch p := rng.IntN(100); {
				case p < 10: // dropped: detected after about an RTT
					net = append(net, netEvent{at: tick + 10 + rng.IntN(10), kind: evLost, f: e.f})
				default:
					if err := r.HandleFrame(e.f.offset, e.f.data, e.f.fin); err != nil {
						t.Fatalf("seed %d: HandleFrame(%d, %d, %v): %v", seed, e.f.offset, len(e.f.data), e.f.fin, err)
					}
					if p < 15 { // spuriously declared lost, acked later
						net = append(net, netEvent{at: tick + 1, kind: evLost, f: e.f})
					}
					net = append(net, netEvent{at: delay(tick), kind: evAck, f: e.f})
				}
			case evAck:
				s.OnAcked(e.f.offset, len(e.f.data), e.f.fin)
			case evLost:
				s.OnLost(e.f.offset, len(e.f.data), e.f.fin)
			case evMaxStreamData:
				s.OnMaxStreamData(e.max)
			case evMaxData:
				cfS.OnMaxData(e.max)
			}
		}

		// The application reads, sometimes.
		if rng.IntN(3) > 0 {
			n, f := r.Read(readBuf[:1+rng.IntN(len(readBuf))])
			got, fin = append(got, readBuf[:n]...), f
		}
		if m, ok := r.ShouldSendMaxStreamData(now, rtt); ok {
			net = append(net, netEvent{at: delay(tick), kind: evMaxStreamData, max: m})
		}
		if m, ok := cfR.ShouldSendMaxData(now, rtt); ok {
			net = append(net, netEvent{at: delay(tick), kind: evMaxData, max: m})
		}
	}
	t.Logf("seed %d: %d bytes, chunk %d, final stream window %d", seed, len(src), cfg.ChunkBytes, r.win.windowBytes)
	if len(got) != len(src) || sha256.Sum256(got) != sha256.Sum256(src) {
		t.Fatalf("seed %d: received %d bytes, sent %d: content differs", seed, len(got), len(src))
	}
	if !r.Done() || cfS.Budget().Used() != 0 || cfR.Budget().Used() != 0 || cfS.Pool().InUse() != 0 || cfR.Pool().InUse() != 0 {
		t.Fatalf("seed %d: recv Done %v; budgets %d/%d, chunks %d/%d in use at the end", seed, r.Done(),
			cfS.Budget().Used(), cfR.Budget().Used(), cfS.Pool().InUse(), cfR.Pool().InUse())
	}
}
