package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/driver/drivertest"
)

// everything allows every address, as an operator's careless
// --allow 0.0.0.0/0 --allow ::/0 does.
func everything(t *testing.T, extra ...string) Policy {
	t.Helper()
	p, err := ParsePolicy(append([]string{"0.0.0.0/0", "::/0"}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyRefusesSpecialAddresses(t *testing.T) {
	own := netip.MustParseAddr("198.51.100.7")
	isLocal := func(a netip.Addr) bool { return a == own }
	for _, tc := range []struct {
		dst   string
		class string // "" for allowed
		extra []string
	}{
		{"198.51.100.8:22", "", nil},
		{"[2001:db8::1]:443", "", nil},
		{"127.0.0.1:22", "loopback", nil},
		{"127.3.2.1:22", "loopback", nil},
		{"[::1]:22", "loopback", nil},
		{"0.0.0.0:22", "unspecified", nil},
		{"[::]:22", "unspecified", nil},
		{"169.254.169.254:80", "link-local", nil},
		{"[fe80::1%eth0]:22", "link-local", nil},
		{"224.0.0.1:5000", "multicast", nil},
		{"[ff02::1]:5000", "multicast", nil},
		{"255.255.255.255:9", "broadcast", nil},
		{"[::ffff:127.0.0.1]:22", "IPv4-mapped IPv6", nil},
		{"[::ffff:198.51.100.8]:22", "IPv4-mapped IPv6", nil},
		{"198.51.100.7:22", "this host's address", nil},
		// Named explicitly: allowed.
		{"127.0.0.1:8080", "", []string{"127.0.0.1/32:8080"}},
		{"127.0.0.1:22", "loopback", []string{"127.0.0.1/32:8080"}}, // another port
		{"169.254.169.254:80", "", []string{"169.254.0.0/16"}},
		{"198.51.100.7:22", "", []string{"198.51.100.7/32"}},
		{"198.51.100.7:22", "this host's address", []string{"198.51.100.0/24"}}, // not by a wider rule
		// A mapped address needs the mapped range named, and its IPv4 address must pass too.
		{"[::ffff:198.51.100.8]:22", "", []string{"::ffff:0:0/96"}},
		{"[::ffff:127.0.0.1]:22", "loopback", []string{"::ffff:0:0/96"}},
	} {
		t.Run(tc.dst+" "+strings.Join(tc.extra, ","), func(t *testing.T) {
			why := everything(t, tc.extra...).Check(netip.MustParseAddrPort(tc.dst), isLocal)
			if (tc.class == "") != (why == "") || !strings.HasPrefix(why, tc.class) {
				t.Errorf("Check = %q; want %q", why, tc.class)
			}
		})
	}
	p, _ := ParsePolicy([]string{"198.51.100.0/24"}, "198.51.100.9/32:22")
	if why := p.Check(netip.MustParseAddrPort("198.51.100.9:22"), nil); !strings.Contains(why, "deny rule 198.51.100.9/32:22") {
		t.Errorf("a deny rule: %q; want it denied by the rule", why)
	}
	if why := p.Check(netip.MustParseAddrPort("198.51.100.9:80"), nil); why != "" {
		t.Errorf("--deny rule on port 22 refuses port 80: %q", why)
	}
}

// TestEgressRefusesItsHost: through a real tunnel, with every address
// allowed, a near edge's flows to the far edge's own host are refused (the
// client gets a RST, as for a refused port) and counted; a rule naming
// 127.0.0.1 explicitly lets the same flow connect.
func TestEgressRefusesItsHost(t *testing.T) {
	leaktest.Check(t)
	port := tcptest.Server(t, hangUp).Port()
	dsts := []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), port),
		netip.AddrPortFrom(netip.MustParseAddr("0.0.0.0"), port),
		netip.AddrPortFrom(netip.MustParseAddr("169.254.169.254"), 80),
		netip.AddrPortFrom(netip.MustParseAddr("224.0.0.1"), port),
	}
	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		tcptest.Serve(t, ln6, hangUp)
		dsts = append(dsts, netip.AddrPortFrom(netip.IPv6Loopback(), uint16(ln6.Addr().(*net.TCPAddr).Port)))
	}
	if own, ok := ownAddr(); ok {
		if lnOwn, err := net.Listen("tcp", netip.AddrPortFrom(own, 0).String()); err == nil {
			tcptest.Serve(t, lnOwn, hangUp)
			dsts = append(dsts, netip.AddrPortFrom(own, uint16(lnOwn.Addr().(*net.TCPAddr).Port)))
		}
	} else {
		t.Log("no non-loopback address on this host: its own-address case is covered by TestPolicyRefusesSpecialAddresses only")
	}
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	run := func(pol Policy, fn func(e *Egress, near *driver.Tunnel)) {
		near, far := drivertest.Pair(t, tcptest.Logger())
		e := New(pol, nil, Options{DialTimeout: time.Second, Logger: tcptest.Logger()})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Serve(ctx, far) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		}()
		fn(e, near)
	}
	run(everything(t), func(e *Egress, near *driver.Tunnel) {
		for _, dst := range dsts {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := near.OpenStream(ctx, src, dst)
			cancel()
			if !errors.Is(err, driver.ErrOpenNotAllowed) {
				if s != nil {
					s.Close()
				}
				t.Errorf("flow to %v with every address allowed: %v; want it refused (not allowed)", dst, err)
			}
		}
		if st := e.Stats(); st.Denied != uint64(len(dsts)) || st.Connected != 0 {
			t.Errorf("stats %+v; want %d denied, none connected", st, len(dsts))
		}
	})
	run(everything(t, "127.0.0.1/32"), func(e *Egress, near *driver.Tunnel) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := near.OpenStream(ctx, src, dsts[0])
		if err != nil {
			t.Fatalf("flow to %v with a rule naming 127.0.0.1: %v; want it connected", dsts[0], err)
		}
		s.Close()
		if st := e.Stats(); st.Connected != 1 || st.Denied != 0 {
			t.Errorf("stats %+v; want 1 connected", st)
		}
	})
}

// hangUp is a server's handler that closes each connection at once
// (tcptest.Serve closes it on return).
func hangUp(*net.TCPConn) {}

// ownAddr returns a non-loopback unicast address of this host.
func ownAddr() (netip.Addr, bool) {
	for a := range hostAddrs() {
		if SpecialClass(a, nil) == "" {
			return a, true
		}
	}
	return netip.Addr{}, false
}
