package cc

import (
	"testing"
	"time"
)

// burstApp is an application that sends files one after another with a
// round trip of silence between them, as a client asking for the next
// file once the last has arrived (HTTP/1.1 without pipelining): file k's
// bytes become available one RTT after every byte of file k-1 was
// acknowledged or declared lost.
type burstApp struct {
	s       *sim
	sizes   []int // bytes of each file, cycled
	quota   int64 // bytes handed to the sender so far
	waitAt  time.Duration
	waiting bool
	files   int // files handed over
}

func (a *burstApp) hasData(elapsed time.Duration) bool {
	s := a.s
	if s.nextPN*int64(s.cfg.mss) < a.quota {
		return true
	}
	if !a.waiting {
		if s.inflight > 0 {
			return false
		}
		a.waiting, a.waitAt = true, elapsed
	}
	if elapsed < a.waitAt+s.cfg.rtt {
		return false
	}
	a.waiting = false
	a.quota += int64(a.sizes[a.files%len(a.sizes)])
	a.files++
	return true
}

// TestBBRStartupEndsOnBurstOverflow: a flow of files with a round trip
// of idle between them (wanbench f5's pattern: 250 Mbit/s, 200 ms, a
// 2 MB queue, files of 64 KiB to 12 MiB) is application-limited in every
// round, so the bandwidth plateau is never seen; Startup must still end
// on the queue overflow its 2.77 gain causes. Each burst's first,
// app-limited flight sees the min RTT; it must not make an overflowing
// round look quiet.
func TestBBRStartupEndsOnBurstOverflow(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		cfg := simConfig{rateBps: 250e6, rtt: 200 * time.Millisecond, queueBytes: 2_000_000, seed: seed}
		b := newTestBBR(seed)
		app := &burstApp{sizes: []int{3 << 20, 256 << 10, 2 << 20, 64 << 10, 12 << 20, 1 << 20}}
		cfg.hasData = app.hasData
		s := newSim(t, cfg, b)
		app.s = s
		s.run(12*time.Second, nil)
		st := b.State()
		if !st.FilledPipe || st.Mode == BBRStartup {
			t.Fatalf("seed %d: still in Startup after 12 s and %d files, %d packets dropped at the queue: %+v", seed, app.files, s.droppedQueue, st)
		}
		dropped, sent, files := s.droppedQueue, s.nextPN, app.files
		s.run(10*time.Second, nil)
		if d := s.droppedQueue - dropped; d > 0 {
			t.Errorf("seed %d: %d of %d packets dropped at the queue in the 10 s after Startup", seed, d, s.nextPN-sent)
		}
		if app.files-files < 15 {
			t.Errorf("seed %d: %d files in 10 s after Startup, want at least 15", seed, app.files-files)
		}
		if st := b.State(); !within(st.MaxBwBps, cfg.rateBps, 0.05) {
			t.Errorf("seed %d: bw %.1f Mbit/s, want the link's %d ±5%%", seed, float64(st.MaxBwBps)/1e6, cfg.rateBps/1e6)
		}
	}
}
