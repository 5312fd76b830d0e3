package recovery

import (
	"slices"
	"testing"
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// t0 is the fake clock's epoch: nonzero, as the package requires.
const t0 = monotime.Time(1_000_000_000)

// ms returns t0 plus n milliseconds.
func ms(n float64) monotime.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }

// mockCall is one recorded Controller call.
type mockCall struct {
	kind          string // "sent", "ack", "applimited", "persistent"
	now           monotime.Time
	bytes         int
	inFlight      int // bytesInFlight argument (sent, applimited)
	acked, lost   []cc.PacketState
	prior, after  int
	ecnCE         int
	rttHasSample  bool
	latestRTTAtCC time.Duration
}

// mockCC is a Controller with a fixed window that records every call.
type mockCC struct {
	cwnd    int
	rateBps uint64
	calls   []mockCall
	record  bool
}

var _ cc.Controller = (*mockCC)(nil)

func newMock(cwnd int) *mockCC { return &mockCC{cwnd: cwnd, record: true} }

func (m *mockCC) OnPacketSent(now monotime.Time, bytes, inFlight int) cc.PacketState {
	if m.record {
		m.calls = append(m.calls, mockCall{kind: "sent", now: now, bytes: bytes, inFlight: inFlight})
	}
	return cc.PacketState{SentTime: now, Bytes: bytes, TxInFlight: inFlight + bytes}
}

func (m *mockCC) OnAck(ev *cc.AckEvent) {
	if m.record {
		m.calls = append(m.calls, mockCall{kind: "ack", now: ev.Now,
			acked: slices.Clone(ev.Acked), lost: slices.Clone(ev.Lost),
			prior: ev.PriorInFlight, after: ev.BytesInFlight, ecnCE: ev.ECNCE,
			rttHasSample: ev.RTT.HasSample(), latestRTTAtCC: ev.RTT.LatestRTT()})
	}
}

func (m *mockCC) OnAppLimited(now monotime.Time, inFlight int) {
	if m.record {
		m.calls = append(m.calls, mockCall{kind: "applimited", now: now, inFlight: inFlight})
	}
}

func (m *mockCC) OnPersistentCongestion(now monotime.Time) {
	if m.record {
		m.calls = append(m.calls, mockCall{kind: "persistent", now: now})
	}
}

func (m *mockCC) CongestionWindow() int { return m.cwnd }
func (m *mockCC) PacingRateBps() uint64 { return m.rateBps }
func (m *mockCC) Name() string          { return "mock" }

// callsOf returns the recorded calls of one kind.
func (m *mockCC) callsOf(kind string) []mockCall {
	var out []mockCall
	for _, c := range m.calls {
		if c.kind == kind {
			out = append(out, c)
		}
	}
	return out
}

// tokens collects the tokens passed to ackedFn and lostFn.
type tokens struct{ acked, lost []uint64 }

func (k *tokens) ackedFn(tok uint64) { k.acked = append(k.acked, tok) }
func (k *tokens) lostFn(tok uint64)  { k.lost = append(k.lost, tok) }

// ack builds an ACK frame from closed ranges given largest first, as
// {smallest, largest} pairs.
func ack(delayUs uint64, ranges ...[2]uint64) *wire.AckFrame {
	f := &wire.AckFrame{AckDelay: delayUs}
	for _, r := range ranges {
		f.Ranges = append(f.Ranges, wire.AckRange{Smallest: r[0], Largest: r[1]})
	}
	return f
}

// newTestSender returns a Sender over a mock controller with a 100-packet
// window and the default configuration.
func newTestSender(t *testing.T) (*Sender, *mockCC, *cc.RTTStats) {
	t.Helper()
	m := newMock(100 * 1200)
	rtt := cc.NewRTTStats(0)
	return NewSender(m, rtt, SenderConfig{}), m, rtt
}

// sendN sends count ack-eliciting packets of 1200 bytes at now, token = pn.
func sendN(s *Sender, now monotime.Time, count int) {
	for range count {
		pn := s.NextPacketNumber()
		s.OnPacketSent(now, pn, 1200, true, pn)
	}
}
