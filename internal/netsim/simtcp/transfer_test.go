package simtcp_test

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

func TestTransferCompletesExactly(t *testing.T) {
	lossy := symmetric(20e6, 60*time.Millisecond, 1, 2)
	lossy.rev.LossPercent = 2
	lossy.fwd.ReorderPercent, lossy.fwd.ReorderDelay = 1, time.Millisecond
	lossy.fwd.DuplicatePercent = 1
	outage := symmetric(20e6, 60*time.Millisecond, 1, 0)
	outage.fwd.Outages = []netsim.Outage{{Start: 500 * time.Millisecond, End: 1500 * time.Millisecond}}
	tests := []struct {
		name                   string
		p                      path
		cfg                    simtcp.Config
		wantLoss, wantTimeouts bool
	}{
		{"one byte", symmetric(10e6, 20*time.Millisecond, 1, 0), simtcp.Config{TotalBytes: 1}, false, false},
		{"one segment", symmetric(10e6, 20*time.Millisecond, 1, 0), simtcp.Config{TotalBytes: 1448}, false, false},
		{"clean reno delack", symmetric(50e6, 40*time.Millisecond, 1, 0),
			simtcp.Config{TotalBytes: 3_000_001, DelayedAck: true, ReceiveBufferBytes: 400_000, Controller: simtcp.NewReno(1448)},
			false, false},
		{"reno overflows queue", symmetric(50e6, 40*time.Millisecond, 1, 0),
			simtcp.Config{TotalBytes: 3_000_001, Controller: simtcp.NewReno(1448)}, true, false},
		{"clean cubic overflows queue", symmetric(50e6, 40*time.Millisecond, 0.5, 0),
			simtcp.Config{TotalBytes: 20_000_000}, true, false},
		{"lossy both ways", lossy, simtcp.Config{TotalBytes: 5_000_000, DelayedAck: true}, true, false},
		{"outage forces RTO", outage, simtcp.Config{TotalBytes: 8_000_000}, true, true},
		{"small buffers", symmetric(50e6, 40*time.Millisecond, 1, 0.5),
			simtcp.Config{TotalBytes: 2_000_000, SendBufferBytes: 30_000, ReceiveBufferBytes: 20_000}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const seed = 11
			sim, _, flows := newSim(seed, tc.p, tc.cfg)
			f := flows[0]
			err := sim.RunUntil(func() bool { return f.snd.Done() && f.rcv.Done() }, sim.Now().Add(120*time.Second))
			ss, rs := f.snd.Stats(), f.rcv.Stats()
			if err != nil {
				t.Fatalf("seed %d: %v; sender %+v receiver %+v", seed, err, ss, rs)
			}
			if rs.DeliveredBytes != tc.cfg.TotalBytes || ss.AckedBytes != tc.cfg.TotalBytes {
				t.Errorf("seed %d: delivered %d, acked %d, want %d", seed, rs.DeliveredBytes, ss.AckedBytes, tc.cfg.TotalBytes)
			}
			if ss.PipeBytes != 0 {
				t.Errorf("seed %d: %d bytes still in the pipe after completion", seed, ss.PipeBytes)
			}
			if (ss.Retransmits > 0) != tc.wantLoss || (ss.RTOs > 0) != tc.wantTimeouts {
				t.Errorf("seed %d: %d retransmits, %d RTOs; want loss %v, timeouts %v (%+v)",
					seed, ss.Retransmits, ss.RTOs, tc.wantLoss, tc.wantTimeouts, ss)
			}
			if ss.Done.Before(rs.Done) {
				t.Errorf("seed %d: sender done at %v before receiver at %v", seed, ss.Done, rs.Done)
			}
			t.Logf("%d bytes in %v: %d segments, %d retransmits, %d fast recoveries, %d RTOs",
				rs.DeliveredBytes, rs.Done.Sub(ss.Start), ss.Segments, ss.Retransmits, ss.FastRecoveries, ss.RTOs)
		})
	}
}
