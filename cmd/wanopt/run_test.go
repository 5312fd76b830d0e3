package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

func testKeys(t *testing.T) (keyFile, peerPub string) {
	t.Helper()
	dir := t.TempDir()
	k, _ := crypt.GenerateKey(rand.Reader)
	p, _ := crypt.GenerateKey(rand.Reader)
	keyFile = filepath.Join(dir, "edge.key")
	if err := os.WriteFile(keyFile, []byte(k.Base64()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, p.PublicKey().Base64()
}

func TestRunConfigErrors(t *testing.T) {
	key, peer := testKeys(t)
	dir := t.TempDir()
	badKey := filepath.Join(dir, "bad.key")
	os.WriteFile(badKey, []byte("not a key\n"), 0o600)
	k, _ := os.ReadFile(key)
	own, _ := crypt.ParsePrivateKey(strings.TrimSpace(string(k)))
	base := []string{"--key", key, "--peer-key", peer}
	far := append(base[:4:4], "--listen", "198.18.0.2:4500")
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{append(base[:4:4], "--allow", "198.18.2.0/24"), "--listen ADDR:PORT"},
		{append(far[:6:6], "--peer", "198.18.0.2:4500", "--allow", "198.18.2.0/24"), "exclusive"},
		{append(base[:4:4], "--listen", "nonsense", "--allow", "198.18.2.0/24"), "--listen"},
		{append(base[:4:4], "--peer", "0.0.0.0:4500", "--tun", "wo0"), "--peer"},
		{[]string{"--peer-key", peer, "--listen", ":4500", "--allow", "198.18.2.0/24"}, "--key FILE is required"},
		{[]string{"--key", filepath.Join(dir, "missing"), "--peer-key", peer, "--listen", "0.0.0.0:4500", "--allow", "198.18.2.0/24"}, "no such file"},
		{[]string{"--key", badKey, "--peer-key", peer, "--listen", "0.0.0.0:4500", "--allow", "198.18.2.0/24"}, "base64 key"},
		{[]string{"--key", key, "--listen", "0.0.0.0:4500", "--allow", "198.18.2.0/24"}, "--peer-key BASE64 is required"},
		{[]string{"--key", key, "--peer-key", "xyz", "--listen", "0.0.0.0:4500", "--allow", "198.18.2.0/24"}, "--peer-key"},
		{[]string{"--key", key, "--peer-key", own.PublicKey().Base64(), "--listen", "0.0.0.0:4500", "--allow", "198.18.2.0/24"}, "own public key"},
		{far, "would do nothing"},
		{append(far[:6:6], "--allow", "198.18.2.0/24:99999"), "--allow"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--cc", "reno"), "--cc"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--egress", "transparent"), "needs --tun NAME"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--egress", "magic"), "want kernel or transparent"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--memory-mib", "8"), "--memory-mib 8"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--log-level", "loud"), "--log-level"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--log-format", "xml"), "--log-format"},
		{[]string{"--key", key, "--listen", ":4500", "--branch", "paris"}, "want NAME:KEY"},
		{[]string{"--key", key, "--listen", ":4500", "--branch", "paris:xyz"}, "--branch paris"},
		{[]string{"--key", key, "--listen", ":4500", "--branch", "paris:" + peer, "--branch-allow", "lyon:10.0.0.0/8"}, "no --branch named"},
		{[]string{"--key", key, "--listen", ":4500", "--branch", "paris:" + peer, "--branch-allow", "paris:10.0.0.0/8:0"}, "--branch-allow"},
		{[]string{"--key", key, "--peer-key", peer, "--listen", ":4500", "--branch", "paris:" + peer}, "exclusive"},
		{[]string{"--key", key, "--tun", "wo0", "--upstream", "dc1:" + peer}, "want NAME:KEY@ADDR:PORT"},
		{[]string{"--key", key, "--tun", "wo0", "--upstream", "dc1:" + peer + "@nowhere"}, "ADDR:PORT"},
		{[]string{"--key", key, "--tun", "wo0", "--upstream", "dc1:" + peer + "@198.18.0.2:4500", "--upstream-route", "dc2:10.0.0.0/8"}, "no --upstream named"},
		{[]string{"--key", key, "--tun", "wo0", "--upstream", "dc1:" + peer + "@198.18.0.2:4500"}, "carries nothing"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--metrics", "9550"), "--metrics"},
		{append(far[:6:6], "--tun", "wo0", "--mtu", "100"), "--mtu"},
		{append(far[:6:6], "--allow", "198.18.2.0/24", "--tunnel-mtu", "1000"), "--tunnel-mtu"},
		{append(far[:6:6], "--tun", "wo0", "--route", "198.18.2.0/24"), "--route needs --tun-setup"},
		{append(far[:6:6], "--tun", "wo0", "--tun-setup", "--route", "bogus"), "--route"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--tun-setup"), "--tun-setup needs --tun"},
		{append(far[:6:6], "--tun", "a-very-long-interface-name"), "15 bytes"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--dial-timeout", "0s"), "--dial-timeout"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--peer-timeout", "2s"), "--peer-timeout"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--wan-rate", "fast"), "--wan-rate"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--wan-rate", "0"), "--wan-rate"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--procs", "-1"), "--procs"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "stray"), "unexpected arguments"},
		{append(far[:6:6], "--bogus"), "unknown flag"},
		{append(far[:6:6], "--tun", "wo0", "--near-rule", "optimise:udp:10.0.0.0/8"), "optimise terminates TCP only"},
		{append(far[:6:6], "--tun", "wo0", "--near-rule", "skip:tcp:10.0.0.0/8"), `action "skip"`},
		{append(far[:6:6], "--tun", "wo0", "--near-rule", "pass:tcp:10.0.0.0/8:0"), "--near-rule"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--near-rule", "pass:tcp:10.0.0.0/8:22"), "it needs --tun NAME"},
		{append(far[:6:6], "--allow", "10.0.0.0/8", "--tun", "wo0", "--egress", "transparent", "--near-rule", "pass:tcp:10.0.0.0/8:22"), "without --egress transparent"},
		{append(far[:6:6], "--config", filepath.Join(dir, "none.conf")), "config file"},
	} {
		var errb bytes.Buffer
		_, err := parseRunConfig(tc.args, &errb)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want a usage error mentioning %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), string(k[:20])) {
			t.Errorf("%q: the error shows the private key", tc.args)
		}
	}
}

func TestRunConfigFile(t *testing.T) {
	key, peer := testKeys(t)
	conf := filepath.Join(t.TempDir(), "edge.conf")
	os.WriteFile(conf, []byte(`# far edge
key = `+key+`
peer-key = `+peer+`
listen = 198.18.0.2:4500   # the WAN address
allow = 198.18.2.0/24:80,443
allow = [2001:db8::/32]
cc = cubic
log-level = debug
wan-rate = 50mbit
peer-timeout = 30m
procs = 1
`), 0o600)
	cfg, err := parseRunConfig([]string{"--config", conf, "--cc", "bbr"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen.String() != "198.18.0.2:4500" || cfg.CC != tunnel.CCBBR || cfg.LogLevel != slog.LevelDebug ||
		cfg.Policy.String() != "198.18.2.0/24:80,443 [2001:db8::/32]" || cfg.TUN != "" || len(cfg.Policy.Rules) == 0 || cfg.Role() != "responder" {
		t.Errorf("config %+v (policy %s)", cfg, cfg.Policy)
	}
	if cfg.WANRateBps != 50e6 || cfg.PeerTimeout != 30*time.Minute || cfg.Procs != 1 {
		t.Errorf("wan-rate %d, peer-timeout %v, procs %d; want 50e6, 30m and 1", cfg.WANRateBps, cfg.PeerTimeout, cfg.Procs)
	}
	for _, bad := range []struct{ text, want string }{
		{"frobnicate = 1\n", `unknown setting "frobnicate"`},
		{"check\n", "cannot be set"},
		{"mtu = lots\n", "mtu"},
	} {
		os.WriteFile(conf, []byte(bad.text), 0o600)
		_, err := parseRunConfig([]string{"--config", conf}, &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "edge.conf:1") {
			t.Errorf("config %q: %v; want a usage error at edge.conf:1 mentioning %q", bad.text, err, bad.want)
		}
	}
}

func TestRunCheck(t *testing.T) {
	key, peer := testKeys(t)
	code, out, errs := run("run", "--check", "--key", key, "--peer-key", peer, "--peer", "198.18.0.2:4500", "--tun", "wo0")
	if code != 0 || !strings.Contains(out, "configuration OK: initiator to 198.18.0.2:4500") || !strings.Contains(out, "ingress on TUN wo0") {
		t.Errorf("--check: code %d, out %q, err %q", code, out, errs)
	}
	k, _ := os.ReadFile(key)
	if strings.Contains(out+errs, strings.TrimSpace(string(k))) {
		t.Error("--check printed the private key")
	}
	// Near rules: in the summary, in order, and a note when TCP is passed.
	code, out, errs = run("run", "--check", "--key", key, "--peer-key", peer, "--peer", "198.18.0.2:4500", "--tun", "wo0",
		"--near-rule", "drop:udp:0.0.0.0/0:137-139", "--near-rule", "pass:tcp:198.18.2.2/32:22")
	if code != 0 || !strings.Contains(out, "near rules: drop:udp:0.0.0.0/0:137-139 pass:tcp:198.18.2.2/32:22") ||
		!strings.Contains(out, "note: ") || !strings.Contains(out, "--egress transparent") {
		t.Errorf("--check with near rules: code %d, out %q, err %q", code, out, errs)
	}
	code, out, errs = run("run", "--check", "--key", key, "--listen", ":4500", "--allow", "198.18.2.0/24:443",
		"--branch", "paris:"+peer, "--branch-allow", "paris:198.18.3.0/24")
	if code != 0 || !strings.Contains(out, "configuration OK: hub on [::]:4500 for branches paris,") {
		t.Errorf("--check of a hub: code %d, out %q, err %q", code, out, errs)
	}
	if code, _, errs := run("run", "--check", "--key", key, "--peer-key", peer); code != 2 || !strings.Contains(errs, "--listen") {
		t.Errorf("--check of a bad config: code %d, stderr %q; want 2 and the reason", code, errs)
	}
	if code, out, errs := run("run", "--help"); code != 0 || !strings.Contains(out, "--allow") || errs != "" {
		t.Errorf("run --help: code %d, stdout %q, stderr %q; want the help on stdout", code, out, errs)
	}
}

// TestRunEdgeStops: a responder waiting for its peer stops promptly, and
// cleanly, when its context ends (SIGINT/SIGTERM in main).
func TestRunEdgeStops(t *testing.T) {
	key, peer := testKeys(t)
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	cfg, err := parseRunConfig([]string{"--key", key, "--peer-key", peer, "--listen", "127.0.0.1:0", "--allow", "127.0.0.1/32", "--control", sock}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var logb bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logb, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runEdge(ctx, cfg, log) }()
	var code int
	var out, errs string
	// A far edge whose peer has not come is down: status 3.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, out, errs = run("status", "--control", sock); code == 3 {
			break
		}
	}
	if code != 3 || !strings.Contains(out, "config: responder on 127.0.0.1:0") || !strings.Contains(out, "tunnel: down") || !strings.Contains(out, "egress: 0 flows") {
		t.Errorf("status: code %d, out %q, stderr %q", code, out, errs)
	}
	if code, out, errs := run("flows", "--control", sock); code != 0 || out != "no flows\n" {
		t.Errorf("flows: code %d, out %q, stderr %q", code, out, errs)
	}
	if code, out, errs := run("flows", "--help"); code != 0 || !strings.Contains(out, "/run/wanopt/wanopt.sock") {
		t.Errorf("flows --help: code %d, stderr %q; want the default socket in\n%s", code, errs, out)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runEdge: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("runEdge did not stop within 5 s of its context ending")
	}
	k, _ := os.ReadFile(key)
	if strings.Contains(logb.String(), strings.TrimSpace(string(k))) {
		t.Error("the log shows the private key")
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the control socket was left behind")
	}
	if code, _, errs := run("status", "--control", sock); code != 1 || !strings.Contains(errs, "cannot reach the edge's control socket "+sock) {
		t.Errorf("status of a stopped edge: code %d, stderr %q", code, errs)
	}
}

// TestRunReload: 'wanopt reload' and SIGHUP make a running edge read its
// config file again: an edited egress policy applies, a change that needs
// a restart is refused with the reason and the running policy stays.
func TestRunReload(t *testing.T) {
	key, peer := testKeys(t)
	dir := t.TempDir()
	sock, conf := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "far.conf")
	write := func(lines ...string) {
		t.Helper()
		base := []string{"key = " + key, "peer-key = " + peer, "listen = 127.0.0.1:0"}
		if err := os.WriteFile(conf, []byte(strings.Join(append(base, lines...), "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("allow = 198.18.2.0/24")
	args := []string{"--config", conf, "--control", sock}
	cfg, err := parseRunConfig(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	startEdge(t, args, cfg)
	// 3: the far edge's peer has not come; the status answers.
	status := statusWhen(t, sock, func(code int) bool { return code == 0 || code == 3 })
	status()
	if code, out, errs := run("reload", "--control", sock); code != 0 || out != "reloaded: nothing changed\n" {
		t.Errorf("reload of the same file: code %d, out %q, stderr %q", code, out, errs)
	}
	write("allow = 198.18.3.0/24:443")
	if code, out, errs := run("reload", "--control", sock); code != 0 || !strings.Contains(out, "reloaded: egress policy: 198.18.3.0/24:443") {
		t.Errorf("reload of a new policy: code %d, out %q, stderr %q", code, out, errs)
	}
	write("allow = 198.18.4.0/24", "memory-mib = 64")
	if code, _, errs := run("reload", "--control", sock); code != 1 || !strings.Contains(errs, "--memory-mib cannot change without a restart") {
		t.Errorf("reload needing a restart: code %d, stderr %q", code, errs)
	}
	write("allow = 198.18.4.0/24:99999")
	if code, _, errs := run("reload", "--control", sock); code != 1 || !strings.Contains(errs, "far.conf:4: allow 198.18.4.0/24:99999") {
		t.Errorf("reload of a broken file: code %d, stderr %q; want the file:line and the rule", code, errs)
	}
	if out := status(); !strings.Contains(out, "198.18.3.0/24:443") {
		t.Errorf("a refused reload changed the running policy: %q", out)
	}
	// SIGHUP does the same (runEdge handles it while it runs).
	write("allow = 198.18.5.0/24")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(status(), "198.18.5.0/24"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP: the policy did not change within 5 s: %q", status())
		}
	}
}

// TestRunReloadHostName: a reload reads the configuration again, which
// looks --peer's host name up again; a new answer is no new --peer, so
// the reload goes through and the edge keeps its running address, which
// the status shows with the name beside it.
func TestRunReloadHostName(t *testing.T) {
	var lookups atomic.Int32
	saved := lookupIP
	t.Cleanup(func() { lookupIP = saved }) // after the edge stopped
	lookupIP = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "far.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		// Each lookup answers another address: 127.0.0.2, 127.0.0.3, …
		n := lookups.Add(1)
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, byte(1 + n)})}, nil
	}
	key, peer := testKeys(t)
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	args := []string{"--key", key, "--peer-key", peer, "--peer", "far.test:4500", "--allow", "127.0.0.1/32:9", "--control", sock}
	cfg, err := parseRunConfig(args, &bytes.Buffer{})
	if err != nil || cfg.PeerHost != "far.test" || cfg.Peer.String() != "127.0.0.2:4500" {
		t.Fatalf("--peer far.test:4500: %+v, %v", cfg, err)
	}
	startEdge(t, args, cfg)
	// 3: nothing answers at the peer's address; the status does.
	status := statusWhen(t, sock, func(code int) bool { return code == 3 })
	status()
	if code, out, errs := run("reload", "--control", sock); code != 0 || out != "reloaded: nothing changed\n" {
		t.Errorf("reload with the name answering 127.0.0.3: code %d, out %q, stderr %q; want nothing changed", code, out, errs)
	}
	if n := lookups.Load(); n < 2 {
		t.Errorf("%d lookups; want the reload to look the name up again", n)
	}
	if out := status(); !strings.Contains(out, "address: 127.0.0.2:4500 (far.test)") {
		t.Errorf("the status does not show the running address and its name:\n%s", out)
	}
}

// startEdge runs the edge of cfg, which reloads from args, until the test
// ends.
func startEdge(t *testing.T, args []string, cfg *runConfig) {
	t.Helper()
	cfg.Reload = reloader(args, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runEdge(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runEdge: %v", err)
		}
	})
}

// statusWhen returns a function that asks the edge at sock for its
// status until the exit code satisfies want (within 5 s), and returns it.
func statusWhen(t *testing.T, sock string, want func(code int) bool) func() string {
	return func() string {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if code, out, _ := run("status", "--control", sock); want(code) {
				return out
			}
		}
		t.Fatal("no status within 5 s")
		return ""
	}
}
