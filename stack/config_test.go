package stack

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	var c Config
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.MaxInFlight != 1024 || c.DialTimeout != 30*time.Second || c.ReceiveBuffer.Default != 1<<20 ||
		c.CongestionControl != "reno" || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	for _, tc := range []struct {
		name string
		bad  Config
	}{
		{"negative MaxInFlight", Config{MaxInFlight: -1}},
		{"receive default below min", Config{ReceiveBuffer: BufferRange{Min: 10, Default: 5, Max: 20}}},
		{"send min 0", Config{SendBuffer: BufferRange{Min: 0, Default: 5, Max: 20}}},
		{"unknown congestion control", Config{CongestionControl: "bbr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.bad.setDefaults(); err == nil {
				t.Errorf("accepted %+v", tc.bad)
			}
		})
	}
	if _, err := New(context.Background(), -1, nil, Config{MTU: 1500}); err == nil {
		t.Error("nil dialer accepted")
	}
	if _, err := New(context.Background(), 0, nil, Config{}); err == nil {
		t.Error("zero MTU accepted")
	}
}

func TestFlowTableStates(t *testing.T) {
	var ft flowTable
	now := time.Unix(100, 0)
	a := ft.add(netip.MustParseAddrPort("198.18.1.1:1000"), netip.MustParseAddrPort("198.18.2.2:80"), now)
	b := ft.add(netip.MustParseAddrPort("198.18.1.1:1001"), netip.MustParseAddrPort("198.18.2.2:80"), now.Add(time.Second))
	a.setState(FlowEstablished)
	a.halfClosed(2)
	b.setState(FlowEstablished)
	b.halfClosed(1)
	b.halfClosed(2)
	a.up.Add(5)
	snap := ft.snapshot(now.Add(3 * time.Second))
	if len(snap) != 2 || snap[0].ID != a.id || snap[0].State != FlowFarClosed || snap[0].BytesUp != 5 ||
		snap[0].Age != 3*time.Second || snap[1].State != FlowClosing {
		t.Fatalf("snapshot %+v", snap)
	}
	if FlowFarClosed.String() != "far-fin" || FlowState(99).String() != "unknown" {
		t.Fatal("state names")
	}
	ft.remove(a)
	ft.remove(b)
	if ft.len() != 0 {
		t.Fatal("not empty")
	}
}
