package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/harness"
)

// runMiddlebox is 'wanbench middlebox' (also 'sack'): a WAN device in bypass that clamps windows
// and forges SACK blocks, plain TCP against wanopt through it.
func runMiddlebox(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flags("middlebox", `A WAN device left in bypass rewrote TCP on a 40 ms path: it clamped the
advertised window to 16 kB and injected selective ACKs the receiver never
sent. The lab's link plays that device, both ways: every TCP window is
clamped to --clamp bytes (after the window scale each sender offered on its
SYN), and every pure ACK gets the SACK block [ack+--sack-offset,
ack+--sack-offset+--sack-len), data the sender has not sent yet; it does
so whether or not the connection negotiated SACK, as the device did.

Then, on the edges lab, one after the other: plain TCP through edges that
only forward (one iperf stream, the server sending; captured at the server
and analysed as 'wanopt analyze' does: the verdict with the window bound,
and the forged blocks as sack-unsent-data), and wanopt, whose WAN carries
only the authenticated tunnel (UDP), where the device finds no TCP to
rewrite: its counters say so.

--tamper-udp goes beyond the field device, which rewrote only TCP: it
also inverts the last byte of that share of UDP datagrams and fixes their
checksums, a device rewriting bytes it does not understand. The tunnel
authenticates every datagram, so each tampered one is refused and counted
(dropped_unauthenticated, or a bad handshake MAC), and costs the tunnel a
retransmission, not the flow its data. With --tamper-udp 0 the device is
the faithful one and tampered_dropped is what the edges refused: 0 unless
something else changed a datagram on the way.

Needs root, iperf 2, tcpdump, and a wanopt binary (--wanopt, next to
wanbench, or on PATH). Writes sack.json, sack.md, plain.pcap and
plain-analysis.txt to --out. Last line:
plain_mbps=X wanopt_mbps=Y tampered_dropped=N
(N: datagrams both edges refused as unauthenticated, summed).
`)
	rtt := fs.Duration("rtt", 40*time.Millisecond, "the link's round-trip time")
	rateS := fs.String("rate", "100mbit", "the link's rate (high enough that the window, not the link, is plain TCP's limit)")
	queueS := fs.String("queue", "", "drop-tail queue in bytes or as time at the rate (default one bandwidth-delay product)")
	clampS := fs.String("clamp", "16KB", "the largest window the device lets any TCP segment advertise")
	offsetS := fs.String("sack-offset", "", "how far past the ACK number the forged SACK block starts (default 4 × --clamp: beyond anything sent)")
	lengthS := fs.String("sack-len", "14480", "bytes the forged SACK block covers")
	tamperS := fs.String("tamper-udp", "1%", "share of UDP datagrams the device also rewrites (0: only TCP, as the field device)")
	plainS := fs.String("plain-bytes", "8MB", "plain TCP's transfer (about 20 s at the default clamp's bound)")
	wanoptS := fs.String("wanopt-bytes", "64MB", "wanopt's measured transfer, after a 4 MB one that warms the tunnel")
	profile := fs.String("profile", harness.Modern.Name, "end hosts' TCP buffers: modern or legacy")
	cc := fs.String("cc", "cubic", "end hosts' congestion control")
	seed := fs.Int64("seed", 1, "seed of the link's random draws (seed+1 the other way)")
	wanopt := fs.String("wanopt", "", "the wanopt binary (default: next to wanbench, else on PATH)")
	out := fs.String("out", "out/sack", "folder for sack.json, sack.md, the capture and its analysis")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	o := exp.MiddleboxOptions{RTT: *rtt, CC: *cc, Seed: *seed, CaptureDir: *out, Logger: log,
		Progress: func(what string) { log.Info("measuring", "path", what) }}
	if *rtt <= 0 {
		return fmt.Errorf("--rtt %v: want a positive duration", *rtt)
	}
	var err error
	if o.RateBps, err = parseRate(*rateS); err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	if *queueS != "" {
		q, d, err := parseQueue(*queueS)
		if err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
		if d > 0 {
			q = int(float64(o.RateBps) / 8 * d.Seconds())
		}
		o.QueueBytes = q
	}
	for _, f := range []struct {
		name string
		s    string
		dst  *int64
	}{{"--plain-bytes", *plainS, &o.PlainBytes}, {"--wanopt-bytes", *wanoptS, &o.WanoptBytes}} {
		if *f.dst, err = parseBytes(f.s); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	clamp, err := parseBytes(*clampS)
	if err != nil || clamp > 1<<30 {
		return fmt.Errorf("--clamp %q: want a window in bytes, e.g. 16KB, at most 1GB", *clampS)
	}
	o.WindowClamp = int(clamp)
	for _, f := range []struct {
		name string
		s    string
		dst  *uint32
	}{{"--sack-offset", *offsetS, &o.SACKOffset}, {"--sack-len", *lengthS, &o.SACKLength}} {
		if f.s == "" {
			continue
		}
		v, err := parseBytes(f.s)
		if err != nil || v >= 1<<31 {
			return fmt.Errorf("%s %q: want bytes below 2GB, e.g. 64KB", f.name, f.s)
		}
		*f.dst = uint32(v)
	}
	if o.TamperUDPPct, err = parsePercent(*tamperS); err != nil {
		return fmt.Errorf("--tamper-udp: %w", err)
	}
	if o.Profile, err = harness.ProfileByName(*profile); err != nil {
		return err
	}
	if o.Wanopt, o.LinkCommand, err = edgeLab(*wanopt); err != nil {
		return err
	}
	res, err := exp.Middlebox(ctx, o)
	if err != nil {
		return err
	}
	fmt.Print("\n" + res.Markdown() + "\n")
	if err := res.WriteFiles(*out); err != nil {
		return err
	}
	fmt.Printf("wrote %s/sack.{json,md}\n%s\n", *out, res.Line())
	return nil
}
