package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// TestEdgeReload: a reload swaps the far edge's egress policy for new
// flows while a flow opened before goes on; a configuration that fails
// validation, or changes what needs a restart, is refused and the running
// policy stays.
func TestEdgeReload(t *testing.T) {
	leaktest.Check(t)
	a := tcptest.Server(t, tcptest.Echo)
	b := tcptest.Server(t, tcptest.Echo)
	rule := func(ap netip.AddrPort) string { return fmt.Sprintf("%v/32:%d", ap.Addr(), ap.Port()) }
	var (
		mu   sync.Mutex
		edit func(*FarConfig) error
	)
	p := startPairWith(t, rule(a), func(c *FarConfig) {
		base := *c
		c.Reload = func() (Config, error) {
			mu.Lock()
			defer mu.Unlock()
			n := base
			return n, edit(&n)
		}
	})
	setEdit := func(f func(*FarConfig) error) {
		mu.Lock()
		edit = f
		mu.Unlock()
	}
	policy := func(rules ...string) func(*FarConfig) error {
		return func(c *FarConfig) error {
			var err error
			c.Policy, err = egress.ParsePolicy(rules)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	dial := func(dst netip.AddrPort) error {
		c, err := p.near.Dial(ctx, src, dst)
		if err == nil {
			c.Close()
		}
		return err
	}
	echo := func(c flow.Conn, msg string) {
		t.Helper()
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatalf("write on the flow opened before the reload: %v", err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo on the flow opened before the reload: %q, %v", buf, err)
		}
	}

	held, err := p.near.Dial(ctx, src, a)
	if err != nil {
		t.Fatalf("dial %v, allowed: %v", a, err)
	}
	defer held.Close()
	echo(held, "before")
	if err := dial(b); !errors.Is(err, flow.ErrNotAllowed) {
		t.Fatalf("dial %v before the reload: %v; want not allowed", b, err)
	}

	// Only b from now on: a's open flow goes on, a new one to a is refused.
	setEdit(policy(rule(b)))
	changed, err := p.far.Reload()
	if err != nil || len(changed) != 1 || !strings.Contains(changed[0], "egress policy") {
		t.Fatalf("reload: changed %q, err %v; want the egress policy", changed, err)
	}
	if err := dial(b); err != nil {
		t.Errorf("dial %v after the reload allowed it: %v", b, err)
	}
	if err := dial(a); !errors.Is(err, flow.ErrNotAllowed) {
		t.Errorf("dial %v after the reload removed it: %v; want not allowed", a, err)
	}
	echo(held, "after")
	if s := p.far.Status().Config; !strings.Contains(s, rule(b)) {
		t.Errorf("status config %q does not show the new policy", s)
	}

	for _, tc := range []struct {
		name string
		edit func(*FarConfig) error
		want string
	}{
		{"invalid", func(c *FarConfig) error { c.MemoryMiB = 1; return nil }, "MemoryMiB 1: want 16 to"},
		{"unreadable", func(*FarConfig) error { return errors.New("config file: no such file") }, "no such file"},
		{"needs a restart", func(c *FarConfig) error { c.MemoryMiB = 64; return policy(rule(a))(c) }, "MemoryMiB cannot change without a restart"},
	} {
		setEdit(tc.edit)
		if changed, err := p.far.Reload(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: reload changed %q, err %v; want refused with %q", tc.name, changed, err, tc.want)
		}
		if err := dial(b); err != nil {
			t.Errorf("%s: the running policy did not stay: dial %v: %v", tc.name, b, err)
		}
	}
	setEdit(policy(rule(b)))
	if changed, err := p.far.Reload(); err != nil || len(changed) != 0 {
		t.Errorf("reload of the same configuration: changed %q, err %v; want nothing", changed, err)
	}
}
