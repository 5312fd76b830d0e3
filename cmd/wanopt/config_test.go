package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parserWords are what Go's parsers say, which no error of 'wanopt run'
// may show.
var parserWords = []string{"ParseAddr", "ParsePrefix", "netip", "strconv", "invalid syntax", "IPv4 field", "unable to parse", "time: ", "invalid argument", "parsing \"", "flag:", "bad command line"}

// farArgs is a valid far edge's command line.
func farArgs(t *testing.T) []string {
	key, peer := testKeys(t)
	return []string{"--key", key, "--peer-key", peer, "--listen", "198.18.0.2:4500", "--allow", "198.18.2.0/24"}
}

// TestRates: --wan-rate and --hub-rate take the usual spellings and need a
// unit.
func TestRates(t *testing.T) {
	key, peer := testKeys(t)
	near := []string{"--key", key, "--peer-key", peer, "--peer", "127.0.0.1:4500", "--tun", "wo0"}
	hub := []string{"--key", key, "--listen", ":4500", "--allow", "198.18.2.0/24", "--branch", "paris:" + peer}
	for _, tc := range []struct {
		in   string
		want uint64
	}{{"50mbit", 50e6}, {"50Mbit", 50e6}, {"50Mbps", 50e6}, {"50M", 50e6}, {"50m", 50e6}, {"1gbit", 1e9}, {"1Gbps", 1e9}, {"250 Mbit/s", 250e6}} {
		cfg, err := parseRunConfig(append(near[:8:8], "--wan-rate", tc.in), &bytes.Buffer{})
		if err != nil || cfg.WANRateBps != tc.want {
			t.Errorf("--wan-rate %s: %v, %v; want %d bit/s", tc.in, cfg, err, tc.want)
		}
		cfg, err = parseRunConfig(append(hub[:8:8], "--hub-rate", tc.in), &bytes.Buffer{})
		if err != nil || cfg.HubRateBps != tc.want {
			t.Errorf("--hub-rate %s: %v; want %d bit/s", tc.in, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"100", "--wan-rate 100: needs a unit, e.g. 100mbit"},
		{"0", "--wan-rate 0: want a rate above zero"},
		{"50MB/s", "--wan-rate 50MB/s: MB/s is bytes per second: give bits per second (50MB/s is 400mbit)"},
		{"fast", "--wan-rate fast: not a rate"},
		{"50Mibit", `unknown unit "Mibit"`},
	} {
		_, err := parseRunConfig(append(near[:8:8], "--wan-rate", tc.in), &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--wan-rate %s: %v; want a usage error saying %q", tc.in, err, tc.want)
		}
		_, err = parseRunConfig(append(hub[:8:8], "--hub-rate", tc.in), &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), strings.Replace(tc.want, "--wan-rate", "--hub-rate", 1)) {
			t.Errorf("--hub-rate %s: %v; want a usage error saying %q", tc.in, err, tc.want)
		}
	}
}

// TestRunCheckRate is the bar: --check fails on a rate without a unit,
// naming it, and passes with 100Mbps.
func TestRunCheckRate(t *testing.T) {
	key, peer := testKeys(t)
	args := []string{"run", "--key", key, "--peer-key", peer, "--peer", "127.0.0.1:4500", "--tun", "wo0", "--check", "--wan-rate"}
	if code, out, errs := run(append(args, "100")...); code != 2 || out != "" || !strings.Contains(errs, "--wan-rate 100: needs a unit, e.g. 100mbit") {
		t.Errorf("--wan-rate 100: exit %d, stdout %q, stderr %q; want 2 and the missing unit", code, out, errs)
	}
	if code, out, errs := run(append(args, "100Mbps")...); code != 0 || !strings.HasPrefix(out, "configuration OK") {
		t.Errorf("--wan-rate 100Mbps: exit %d, stdout %q, stderr %q; want it accepted", code, out, errs)
	}
}

func writeConf(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.conf")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigDuplicates: a setting that takes one value given twice is an
// error naming both lines, even when the command line overrides it; a
// repeatable one takes several lines.
func TestConfigDuplicates(t *testing.T) {
	key, peer := testKeys(t)
	base := []string{"key = " + key, "peer-key = " + peer}
	for _, tc := range []struct {
		lines []string
		args  []string
		want  string // "" : accepted
	}{
		{append(base[:2:2], "listen = :4500", "# the other one", "listen = :4501", "allow = 10.0.0.0/8"), nil, "edge.conf:5: listen is given twice, here and on line 3"},
		{append(base[:2:2], "listen = :4500", "allow = 10.0.0.0/8", "listen = :4500"), []string{"--listen", ":4600"}, "edge.conf:5: listen is given twice, here and on line 3"},
		{append(base[:2:2], "listen = :4500", "allow = 10.0.0.0/8", "tun-setup", "tun-setup = false"), nil, "edge.conf:6: tun-setup is given twice, here and on line 5"},
		{append(base[:2:2], "key = "+key, "listen = :4500", "allow = 10.0.0.0/8"), nil, "edge.conf:3: key is given twice, here and on line 1"},
		{append(base[:2:2], "listen = :4500", "allow = 10.0.0.0/8", "allow = 10.1.0.0/16", "deny = 10.0.0.1", "deny = 10.0.0.2"), nil, ""},
	} {
		conf := writeConf(t, tc.lines...)
		cfg, err := parseRunConfig(append([]string{"--config", conf}, tc.args...), &bytes.Buffer{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v; want it accepted", tc.lines, err)
		case tc.want == "" && len(cfg.Policy.Rules) != 2:
			t.Errorf("%q: policy %s; want both allow lines", tc.lines, cfg.Policy)
		case tc.want != "" && (!errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v; want a usage error saying %q", tc.lines, err, tc.want)
		}
	}
}

// TestConfigErrorsCarryFileLine: every error about a value from the file
// names the file and the line, also when it is found after the file is
// read; the same value on the command line names the flag.
func TestConfigErrorsCarryFileLine(t *testing.T) {
	key, peer := testKeys(t)
	base := []string{"key = " + key, "peer-key = " + peer, "listen = :4500", "allow = 198.18.2.0/24"}
	for _, tc := range []struct {
		line, want string
	}{
		{"allow = 300.1.2.3/32", "edge.conf:5: allow 300.1.2.3/32: 300.1.2.3 is not an IP address"},
		{"allow = 10.0.0.0/8:99999", `edge.conf:5: allow 10.0.0.0/8:99999: port "99999" is not a number from 1 to 65535`},
		{"deny = 10.0.0.0/33", "edge.conf:5: deny 10.0.0.0/33: /33 is longer than an IPv4 address"},
		{"tun-addr = 10.0.0.1", "edge.conf:5: tun-addr 10.0.0.1: not a prefix"},
		{"route = 10.0.0.0/8", "--route needs --tun-setup and --tun: the edge sets it when it sets up the TUN device (DIR/edge.conf:5 route)"},
		{"near-rule = skip:tcp:10.0.0.0/8", `edge.conf:5: near-rule skip:tcp:10.0.0.0/8: action "skip" is not optimise, pass or drop`},
		{"wan-rate = 100", "edge.conf:5: wan-rate 100: needs a unit, e.g. 100mbit"},
		{"mtu = lots", "edge.conf:5: mtu lots: not a whole number"},
		{"mtu = 100", "--mtu 100: want 1280 to 65535 (DIR/edge.conf:5 mtu)"},
		{"peer-timeout = 5", "edge.conf:5: peer-timeout 5: not a duration"},
		{"peer-timeout = 1s", "--peer-timeout 1s: want at least 5s (keepalives go every 10 s) (DIR/edge.conf:5 peer-timeout)"},
		{"tun-setup = yes", "edge.conf:5: tun-setup yes: want true or false"},
		{"cc = reno", "edge.conf:5: cc reno: want bbr or cubic"},
		{"egress = magic", "edge.conf:5: egress magic: want kernel or transparent"},
		{"metrics = 9550", "edge.conf:5: metrics 9550: want ADDR:PORT"},
		{"branch = paris", "edge.conf:5: branch paris: want NAME:KEY"},
		{"peer = 198.18.0.2:4500", "--listen and --peer are exclusive: an edge either accepts the tunnel or opens it (DIR/edge.conf:3 listen, DIR/edge.conf:5 peer)"},
		{"listen", "edge.conf:5: listen needs a value: listen = ADDR:PORT"},
		{"memory-mib =", "edge.conf:5: memory-mib has no value"},
		{"--allow = 10.0.0.0/8", `edge.conf:5: write the setting "--allow" without dashes: allow = …`},
		{"frobnicate = 1", `edge.conf:5: unknown setting "frobnicate"`},
	} {
		conf := writeConf(t, append(base[:4:4], tc.line)...)
		want := strings.ReplaceAll(tc.want, "DIR/", filepath.Dir(conf)+"/")
		_, err := parseRunConfig([]string{"--config", conf}, &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want a usage error saying %q", tc.line, err, tc.want)
		}
	}
}

// TestNoParserText: no error of a table of bad inputs, on the command line
// or in the file, shows the words of Go's parsers.
func TestNoParserText(t *testing.T) {
	far := farArgs(t)
	bad := [][]string{
		{"--allow", "300.1.2.3/32"}, {"--allow", "10.0.0.0/8:http"}, {"--allow", "[2001:db8::/32"}, {"--allow", "[2001:db8::/32]443"},
		{"--allow", "2001:db8::/32:443"}, {"--allow", "10.0.0.0/x"}, {"--allow", "fe80::1%eth0/64"}, {"--deny", "10.0.0.0/8:90-80"},
		{"--listen", "300.1.2.3:4500"}, {"--listen", "nonsense"}, {"--listen", "1.2.3.4:99999"}, {"--peer", "300.1.2.3:4500"},
		{"--tun", "wo0", "--tun-setup", "--tun-addr", "300.0.0.1/30"}, {"--tun", "wo0", "--tun-setup", "--route", "10.0.0.0/99"},
		{"--tun", "wo0", "--near-rule", "pass:tcp:300.1.2.3/32"}, {"--tun", "wo0", "--near-rule", "pass"},
		{"--mtu", "big"}, {"--max-flows", "1e3"}, {"--dial-timeout", "10"}, {"--tun-setup=maybe"}, {"--procs", "-1"},
		{"--wan-rate", "1e9"}, {"--hub-rate", "100"}, {"--metrics", ":x:"}, {"--peer-key", "xyz"}, {"--key", "/nonexistent/k"},
		{"--branch", "paris:" + strings.Repeat("A", 43) + "="}, {"--config", "/nonexistent.conf"},
	}
	for _, extra := range bad {
		_, err := parseRunConfig(append(far[:8:8], extra...), &bytes.Buffer{})
		if err == nil {
			t.Errorf("%q: accepted", extra)
			continue
		}
		for _, w := range parserWords {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q shows the parser's %q", extra, err, w)
			}
		}
		if len(extra) == 2 && strings.HasPrefix(extra[0], "--") {
			// In a file, the same value fails naming the file and line.
			conf := writeConf(t, strings.TrimPrefix(extra[0], "--")+" = "+extra[1])
			_, err := parseRunConfig(append(far[:8:8], "--config", conf), &bytes.Buffer{})
			if extra[0] == "--config" || extra[0] == "--key" || extra[0] == "--listen" || extra[0] == "--allow" || extra[0] == "--peer-key" {
				continue // set on the command line too, which wins
			}
			if err == nil || !strings.Contains(err.Error(), "edge.conf:1") {
				t.Errorf("%s in a file: %v; want the error at edge.conf:1", extra, err)
			}
			for _, w := range parserWords {
				if err != nil && strings.Contains(err.Error(), w) {
					t.Errorf("%s in a file: %q shows the parser's %q", extra, err, w)
				}
			}
		}
	}
}

// TestHostNames: --peer and --upstream take host names, resolved when the
// configuration is read and kept beside the address (the edge looks them
// up again); a name that does not resolve is an error naming it.
func TestHostNames(t *testing.T) {
	saved := lookupIP
	defer func() { lookupIP = saved }()
	lookupIP = func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "far.example.net":
			return []netip.Addr{netip.MustParseAddr("192.0.2.2")}, nil
		case "dual.example.net":
			return []netip.Addr{netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("192.0.2.3")}, nil
		case "mapped.example.net":
			return []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.4")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	key, peer := testKeys(t)
	near := []string{"--key", key, "--peer-key", peer, "--tun", "wo0", "--peer"}
	for _, tc := range []struct{ peer, want, host, note string }{
		{"far.example.net:4500", "192.0.2.2:4500", "far.example.net", ""},
		{"dual.example.net:4500", "[2001:db8::2]:4500", "dual.example.net", "dual.example.net has 2 addresses; using 2001:db8::2"},
		{"mapped.example.net:4500", "192.0.2.4:4500", "mapped.example.net", ""},
		{"198.18.0.2:4500", "198.18.0.2:4500", "", ""},
	} {
		var warn bytes.Buffer
		cfg, err := parseRunConfig(append(near[:7:7], tc.peer), &warn)
		if err != nil || cfg.Peer.String() != tc.want || cfg.PeerHost != tc.host || !strings.Contains(warn.String(), tc.note) {
			t.Errorf("--peer %s: %v, %v, note %q; want %s from host %q and note %q", tc.peer, cfg, err, warn.String(), tc.want, tc.host, tc.note)
		}
	}
	for _, tc := range []struct{ peer, want string }{
		{"gone.example.net:4500", "--peer gone.example.net:4500: the host name gone.example.net did not resolve (no such host)"},
		{"far.example.net:0", `--peer far.example.net:0: port "0" is not a number from 1 to 65535`},
		{"far.example.net", "--peer far.example.net: want ADDR:PORT or HOST:PORT"},
		{"300.1.2.3:4500", "--peer 300.1.2.3:4500: 300.1.2.3 is not an IP address"},
	} {
		_, err := parseRunConfig(append(near[:7:7], tc.peer), &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--peer %s: %v; want a usage error saying %q", tc.peer, err, tc.want)
		}
	}
	cfg, err := parseRunConfig([]string{"--key", key, "--tun", "wo0", "--upstream", "dc1:" + peer + "@far.example.net:4500", "--upstream-route", "dc1:10.0.0.0/8"}, &bytes.Buffer{})
	if err != nil || len(cfg.Upstreams) != 1 || cfg.Upstreams[0].Addr.String() != "192.0.2.2:4500" || cfg.Upstreams[0].Host != "far.example.net" {
		t.Errorf("--upstream with a host name: %v, %v", cfg, err)
	}
	_, err = parseRunConfig([]string{"--key", key, "--tun", "wo0", "--upstream", "dc1:" + peer + "@gone.example.net:4500", "--upstream-route", "dc1:10.0.0.0/8"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--upstream dc1: gone.example.net:4500: the host name gone.example.net did not resolve") {
		t.Errorf("--upstream with an unknown host: %v", err)
	}
}

// TestRouteNeedsTUN: --route and --tun-addr without --tun-setup and --tun
// say so, not that the edge would do nothing.
func TestRouteNeedsTUN(t *testing.T) {
	key, peer := testKeys(t)
	for _, args := range [][]string{
		{"--key", key, "--peer-key", peer, "--peer", "192.0.2.2:4500", "--route", "198.18.2.0/24"},
		{"--key", key, "--peer-key", peer, "--peer", "192.0.2.2:4500", "--tun", "wo0", "--route", "198.18.2.0/24"},
		{"--key", key, "--peer-key", peer, "--peer", "192.0.2.2:4500", "--tun-setup", "--route", "198.18.2.0/24"},
	} {
		_, err := parseRunConfig(args, &bytes.Buffer{})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--route needs --tun-setup and --tun") {
			t.Errorf("%q: %v; want '--route needs --tun-setup and --tun'", args, err)
		}
	}
	_, err := parseRunConfig([]string{"--key", key, "--peer-key", peer, "--peer", "192.0.2.2:4500", "--tun-addr", "198.18.3.1/30"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--tun-addr needs --tun-setup and --tun") {
		t.Errorf("--tun-addr alone: %v", err)
	}
}
