package tunnel

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// bulkBothWays runs streams opened by the client, up bytes each from
// client to server and down bytes each back, on a connection warmed from
// client to server, and returns each direction's goodput in Mbit/s (0 for
// a direction that carries nothing) and the most stream memory each end
// held meanwhile.
func bulkBothWays(t *testing.T, path pathConfig, streams, up, down int) (upMbps, downMbps float64, cliMax, srvMax uint64) {
	t.Helper()
	n := newTestNet(t, 1, path, nil)
	warmUp(t, n, 1, path)
	cli, srv := newBulkApp(n.client.c, up, false, 7), newBulkApp(n.server.c, down, false, 8)
	n.client.onEvent, n.server.onEvent = cli.onEvent, srv.onEvent
	start := n.sim.Now()
	cli.open(start, streams)
	n.sim.Wake(n.flow)
	var upAt, downAt monotime.Time
	n.runUntil(t, 300*time.Second, func() bool {
		cliMax = max(cliMax, n.client.c.Stats().BudgetUsedBytes)
		srvMax = max(srvMax, n.server.c.Stats().BudgetUsedBytes)
		if b, f := srv.received(); up > 0 && upAt == 0 && f && b == streams*up {
			upAt = n.sim.Now()
		}
		if b, f := cli.received(); down > 0 && downAt == 0 && f && b == streams*down {
			downAt = n.sim.Now()
		}
		return (up == 0 || upAt != 0) && (down == 0 || downAt != 0)
	})
	if up > 0 {
		upMbps = float64(streams*up) * 8 / 1e6 / upAt.Sub(start).Seconds()
	}
	if down > 0 {
		downMbps = float64(streams*down) * 8 / 1e6 / downAt.Sub(start).Seconds()
	}
	return upMbps, downMbps, cliMax, srvMax
}

// TestSendCapBothWays: bulk data both ways at once moves each way about
// as fast as alone: each end's send streams must not take the memory
// budget the other direction's receive windows grow from.
func TestSendCapBothWays(t *testing.T) {
	path := pathConfig{rateBps: 250_000_000, rtt: 200 * time.Millisecond}
	const streams, size = 4, 40 << 20
	alone, _, _, _ := bulkBothWays(t, path, streams, size, 0)
	_, downAlone, _, _ := bulkBothWays(t, path, streams, 0, size)
	up, down, cliMax, srvMax := bulkBothWays(t, path, streams, size, size)
	t.Logf("up %.1f Mbit/s (alone %.1f), down %.1f (alone %.1f); stream memory at most %.1f MiB (client) and %.1f MiB (server)",
		up, alone, down, downAlone, float64(cliMax)/(1<<20), float64(srvMax)/(1<<20))
	if up < 0.95*alone || down < 0.95*downAlone {
		t.Errorf("both ways: up %.1f Mbit/s, down %.1f; alone %.1f and %.1f: want at least 0.95 of each", up, down, alone, downAlone)
	}
}

// TestSendCapShortPath: on a short path the sender holds a few
// megabytes of data, not its whole budget (64 MiB here), and still fills
// the link. The bound leaves room for the cap's 4 MiB, the streams'
// receive windows and the warm-up's.
func TestSendCapShortPath(t *testing.T) {
	path := pathConfig{rateBps: 250_000_000, rtt: 2 * time.Millisecond}
	const streams, size = 4, 20 << 20
	up, _, cliMax, _ := bulkBothWays(t, path, streams, size, 0)
	const limit = 16 << 20
	t.Logf("up %.1f Mbit/s; the client's stream memory at most %.1f MiB (limit %.1f)", up, float64(cliMax)/(1<<20), float64(limit)/(1<<20))
	if up < 0.9*250 {
		t.Errorf("up %.1f Mbit/s, want at least 0.9 of the link", up)
	}
	if cliMax > limit {
		t.Errorf("the sender held %d bytes of stream memory, want at most %d", cliMax, limit)
	}
}
