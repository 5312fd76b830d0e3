package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/wanopt/wanopt/bench/lab"
)

// Profile is a kernel TCP configuration for the lab's end hosts.
type Profile struct {
	Name string
	Rmem string // net.ipv4.tcp_rmem
	Wmem string // net.ipv4.tcp_wmem
}

// The endpoint profiles. New namespaces inherit the host's buffer maxima,
// so both are set explicitly.
var (
	// Modern is Linux's defaults.
	Modern = Profile{Name: "modern", Rmem: "4096 131072 6291456", Wmem: "4096 16384 4194304"}
	// Legacy caps both hosts' windows at 512 KB, like the hosts in the
	// published test whose plain TCP fell to ~60 Mbit/s at 200-250 ms.
	Legacy = Profile{Name: "legacy", Rmem: "4096 131072 524288", Wmem: "4096 16384 524288"}
)

// ProfileByName returns the named profile.
func ProfileByName(name string) (Profile, error) {
	switch name {
	case Modern.Name:
		return Modern, nil
	case Legacy.Name:
		return Legacy, nil
	}
	return Profile{}, fmt.Errorf("unknown TCP profile %q: want modern or legacy", name)
}

// ApplyTCP configures congestion control and buffers on the lab's end hosts
// and flushes cached metrics (ssthresh), so no run inherits them.
func ApplyTCP(ctx context.Context, l *lab.Lab, cc string, p Profile) error {
	// Allowed again before every run: another lab's restore of the
	// host's list at its end may have taken cc away.
	if _, err := AllowCongestionControl(cc); err != nil {
		return err
	}
	for _, h := range []*lab.Host{l.Client, l.Server} {
		for _, kv := range [][2]string{
			{"net.ipv4.tcp_congestion_control", cc},
			{"net.ipv4.tcp_rmem", p.Rmem},
			{"net.ipv4.tcp_wmem", p.Wmem},
			{"net.ipv4.tcp_no_metrics_save", "1"},
		} {
			if err := l.Sysctl(ctx, h, kv[0], kv[1]); err != nil {
				return err
			}
		}
		if out, err := l.Command(ctx, h, "ip", "tcp_metrics", "flush", "all").CombinedOutput(); err != nil {
			return fmt.Errorf("flush tcp metrics in %s: %w: %s", h.NS, err, out)
		}
	}
	return nil
}

const allowedCCPath = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"

// BuildEdgesLab allows congestion control cc on the host and builds an edges
// lab; close removes the lab and restores the host's list.
func BuildEdgesLab(ctx context.Context, cc string, linkCommand []string, log *slog.Logger) (l *lab.Lab, close func(), err error) {
	return BuildEdgesLabOpts(ctx, cc, lab.Options{Kind: lab.Edges, LinkCommand: linkCommand, Realtime: true, Logger: log})
}

// BuildEdgesLabOpts is BuildEdgesLab with the lab's options given.
func BuildEdgesLabOpts(ctx context.Context, cc string, opts lab.Options) (l *lab.Lab, close func(), err error) {
	restore, err := AllowCongestionControl(cc)
	if err != nil {
		return nil, nil, err
	}
	l, err = lab.Build(ctx, opts)
	if err != nil {
		restore()
		return nil, nil, err
	}
	return l, func() { l.Close(); restore() }, nil
}

// IperfEdgesLab is BuildEdgesLabOpts with an iperf server started on the
// lab's server host. close ends the server and waits for it before it
// removes the lab, whose Close checks every process it started.
func IperfEdgesLab(ctx context.Context, cc string, opts lab.Options) (l *lab.Lab, srv *IperfServer, close func(), err error) {
	l, closeLab, err := BuildEdgesLabOpts(ctx, cc, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if srv, err = StartIperfServer(ctx, l, l.Server); err != nil {
		if srv != nil {
			srv.kill() // it started and did not listen
		}
		closeLab()
		return nil, nil, nil, err
	}
	return l, srv, func() { srv.kill(); closeLab() }, nil
}

// AllowCongestionControl adds names to the host's allowed congestion
// controls and returns a function that restores the previous list.
func AllowCongestionControl(names ...string) (restore func(), err error) {
	old, err := os.ReadFile(allowedCCPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", allowedCCPath, err)
	}
	cur := strings.Fields(string(old))
	want := slices.Clone(cur)
	for _, n := range names {
		if !slices.Contains(want, n) {
			want = append(want, n)
		}
	}
	if len(want) == len(cur) {
		return func() {}, nil
	}
	if err := os.WriteFile(allowedCCPath, []byte(strings.Join(want, " ")), 0o644); err != nil {
		return nil, fmt.Errorf("allow congestion control %v (is the module available? see tcp_available_congestion_control): %w", names, err)
	}
	return func() { _ = os.WriteFile(allowedCCPath, old, 0o644) }, nil
}
