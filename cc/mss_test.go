package cc

import "testing"

// TestSetMSS: every controller takes a new packet size and ignores a
// size of 0.
func TestSetMSS(t *testing.T) {
	for _, c := range []Controller{NewBBR(BBRConfig{MSS: 1472}), NewCubic(1472, 0), NewFixed(1e6, 1472)} {
		s, ok := c.(MSSSetter)
		if !ok {
			t.Fatalf("%s does not implement MSSSetter", c.Name())
		}
		s.SetMSS(1232)
		s.SetMSS(0)
		var got int
		switch c := c.(type) {
		case *BBR:
			got = c.mss
		case *Cubic:
			got = c.mss
		case *Fixed:
			got = c.mss
		}
		if got != 1232 {
			t.Errorf("%s: mss %d after SetMSS(1232), SetMSS(0); want 1232", c.Name(), got)
		}
	}
}
