package flow

import "testing"

type limiter SendLimit

func (l limiter) SendLimit() SendLimit { return SendLimit(l) }

func TestWhy(t *testing.T) {
	for _, tc := range []struct {
		name          string
		up, down      Wait
		wan           SendLimit
		upBps, downBp uint64
		want          string
	}{
		{"nothing moves", WaitRead, WaitRead, SendFree, 0, 0, "idle"},
		{"the client does not read", WaitRead, WaitWrite, SendFree, 0, 0, "client-window"},
		{"download, client reads slowly", WaitRead, WaitWrite, SendFree, 1e3, 4e6, "client-window"},
		{"download, data arrives slowly", WaitRead, WaitRead, SendFree, 1e3, 4e6, "far-edge"},
		{"upload, client sends slowly", WaitRead, WaitRead, SendFree, 4e6, 1e3, "client-sends"},
		{"upload, tunnel full", WaitWrite, WaitRead, SendCongestion, 4e6, 1e3, "tunnel"},
		{"upload, peer window", WaitWrite, WaitRead, SendPeerWindow, 4e6, 1e3, "far-edge"},
		{"upload, memory", WaitWrite, WaitRead, SendMemory, 4e6, 1e3, "memory"},
		{"upload stuck on the peer", WaitWrite, WaitRead, SendPeerWindow, 0, 0, "far-edge"},
	} {
		var s RelayState
		s.lanToWAN.set(tc.up)
		s.wanToLAN.set(tc.down)
		var l SendLimiter = limiter(tc.wan)
		s.wan.Store(&l)
		if got := s.Why(tc.upBps, tc.downBp).Name("client", "far-edge"); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	var none *RelayState
	if got := none.Why(1, 1); got != LimitIdle {
		t.Errorf("nil state: %v", got)
	}
}
