package wanem

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // a substring of the error; "" means valid
	}{
		{"zero is a perfect link", Config{}, ""},
		{"full lab config", Config{Delay: 300 * time.Millisecond, Jitter: time.Millisecond, LossPct: 1,
			BurstLoss:  &GilbertElliott{PGoodToBad: 0.01, PBadToGood: 0.3, LossInBad: 1},
			ReorderPct: 1, DupPct: 1, RateBps: 250e6, QueueDelay: 50 * time.Millisecond}, ""},
		{"100 percent is allowed", Config{LossPct: 100, ReorderPct: 100, DupPct: 100}, ""},
		{"negative delay", Config{Delay: -time.Millisecond}, "Delay"},
		{"negative jitter", Config{Jitter: -1}, "Jitter"},
		{"negative reorder delay", Config{ReorderDelay: -1}, "ReorderDelay"},
		{"loss above 100", Config{LossPct: 101}, "LossPct"},
		{"loss negative", Config{LossPct: -0.1}, "LossPct"},
		{"loss NaN", Config{LossPct: math.NaN()}, "LossPct"},
		{"reorder above 100", Config{ReorderPct: 200}, "ReorderPct"},
		{"dup negative", Config{DupPct: -1}, "DupPct"},
		{"GE as percent", Config{BurstLoss: &GilbertElliott{PGoodToBad: 5}}, "PGoodToBad"},
		{"GE negative", Config{BurstLoss: &GilbertElliott{LossInBad: -1}}, "LossInBad"},
		{"queue without rate", Config{QueueBytes: 100_000}, "RateBps"},
		{"queue delay without rate", Config{QueueDelay: time.Millisecond}, "RateBps"},
		{"both queue limits", Config{RateBps: 1e6, QueueBytes: 100_000, QueueDelay: time.Second}, "both"},
		{"negative queue", Config{RateBps: 1e6, QueueBytes: -1}, "QueueBytes"},
		{"negative queue delay", Config{RateBps: 1e6, QueueDelay: -1}, "QueueDelay"},
		{"queue below a packet", Config{RateBps: 1e6, QueueBytes: 1000}, "below 1500"},
		{"queue delay below a packet", Config{RateBps: 1e6, QueueDelay: time.Millisecond}, "below 1500"},
		{"queue delay exactly a packet", Config{RateBps: 1e6, QueueDelay: 12 * time.Millisecond}, ""},
		{"rate too high", Config{RateBps: math.MaxUint64}, "RateBps"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			_, perr := NewPipe(tc.cfg)
			if (err == nil) != (perr == nil) {
				t.Fatalf("Validate says %v but NewPipe says %v", err, perr)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid config rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid config accepted, want an error about %q", tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q: want ErrInvalidConfig mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	in := Config{Delay: 100 * time.Millisecond, LossPct: 0.5, RateBps: 250e6, QueueBytes: 1 << 20, Seed: -3,
		BurstLoss: &GilbertElliott{PGoodToBad: 0.1, PBadToGood: 0.2, LossInGood: 0.3, LossInBad: 0.4}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Config
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.BurstLoss == nil || *out.BurstLoss != *in.BurstLoss {
		t.Fatalf("burst loss lost in %s", b)
	}
	out.BurstLoss, in.BurstLoss = nil, nil
	if out != in {
		t.Fatalf("round trip through %s gave %+v, want %+v", b, out, in)
	}
}

func TestPipeKeepsItsOwnConfig(t *testing.T) {
	ge := &GilbertElliott{PGoodToBad: 0, PBadToGood: 1}
	p := mustPipe(t, Config{BurstLoss: ge})
	ge.PGoodToBad, ge.LossInBad = 1, 1 // would lose everything if shared
	for i := range 100 {
		p.Enqueue(t0, packet(20, uint64(i)))
	}
	if c := p.Counters(); c.BurstLost != 0 {
		t.Fatalf("changing the caller's GilbertElliott after NewPipe changed the pipe: %d lost", c.BurstLost)
	}
}
