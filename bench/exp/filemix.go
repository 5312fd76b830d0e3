package exp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image/color"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/report"
	"github.com/wanopt/wanopt/bench/wanem"
)

// mixKiB is the file-mix lab's mix: 24 files from 16 KiB to 3 MiB, 27 MiB
// in all, in request order. File i goes to connection i mod 4 with four
// connections, which gives each 6 files and a quarter of the bytes, small
// and large alternating as on a web page.
var mixKiB = [...]int64{
	16, 128, 64, 32,
	3072, 2048, 1536, 640,
	240, 384, 192, 352,
	1024, 3072, 3072, 2048,
	512, 256, 512, 768,
	2048, 1024, 1536, 3072,
}

// mixSeed seeds the files' content: file i is ChaCha8's output for these
// 32 bytes with the last set to i+1, reproducible and incompressible.
var mixSeed = [32]byte{'w', 'a', 'n', 'b', 'e', 'n', 'c', 'h', ' ', 'f', '5', ' ', 'f', 'i', 'l', 'e', ' ', 'm', 'i', 'x'}

// MixFile is one file of the mix.
type MixFile = harness.File

// Mix returns the mix's files in request order, without their hashes
// (WriteMixFiles computes those).
func Mix() []MixFile {
	files := make([]MixFile, len(mixKiB))
	for i, kib := range mixKiB {
		files[i] = MixFile{Name: fmt.Sprintf("f%02d-%dk.bin", i+1, kib), Size: kib << 10}
	}
	return files
}

// mixContent is file i's content stream.
func mixContent(i int) io.Reader {
	seed := mixSeed
	seed[31] = byte(i + 1)
	return rand.NewChaCha8(seed)
}

// WriteMixFiles writes the mix into dir (readable by all, for nginx's
// workers) and returns it with each file's SHA-256.
func WriteMixFiles(dir string) ([]MixFile, error) {
	files := Mix()
	for i := range files {
		path := filepath.Join(dir, files[i].Name)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("write the file mix: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(mixContent(i), files[i].Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		files[i].SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return files, nil
}

// mixChains deals the files to conns connections: file i to connection
// i mod conns, each fetching its share in order.
func mixChains(files []MixFile, conns int) [][]MixFile {
	chains := make([][]MixFile, conns)
	for i, f := range files {
		chains[i%conns] = append(chains[i%conns], f)
	}
	return chains
}

func totalSize(files []MixFile) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}

// FileMixIdeal is the fetch's time on a link that is always full and adds only
// its delay: the bytes at the link rate plus one round trip per request of
// the longest chain (HTTP/1.1, no pipelining). Chains' waits are counted as
// if they never overlapped, so a run can beat it.
func FileMixIdeal(bytes int64, rateBps float64, rtt time.Duration, requests int) float64 {
	return float64(bytes)*8/rateBps + float64(requests)*rtt.Seconds()
}

// idealFormula is FileMixIdeal in words, for the JSON and the table's note.
const idealFormula = "ideal_s = 8 × bytes / link rate + RTT × requests in the longest chain (24 on one connection, 6 on each of four; four chains can fill each other's waits, so a run can beat it)"

// FileMixOptions configure FileMix. Zero values take the defaults.
type FileMixOptions struct {
	RTTs     []time.Duration   // default 0, 50, 100, 200 ms
	Runs     int               // per point and path; default 3, the median reported
	RateBps  uint64            // the link's rate; default 250 Mbit/s
	Queue    int               // the link's drop-tail queue, bytes; default 2 MB
	Profiles []harness.Profile // default Modern and Legacy
	Conns    []int             // connections sharing the list; default 1 and 4
	CC       string            // the end hosts' congestion control; default cubic
	Wanopt   string            // the wanopt binary (see FindWanopt)
	// EdgeArgs are added to both wanopt edges' command lines.
	EdgeArgs []string
	// CaptureDir, if set, keeps every run's capture there.
	CaptureDir  string
	LinkCommand []string // starts the lab's link emulator
	Logger      *slog.Logger
	// Progress, if set, is called after every run; what is "plain" or
	// "wanopt".
	Progress func(done, total int, row FileMixRow, what string, run FileMixRun)
}

func (o *FileMixOptions) defaults() {
	if len(o.RTTs) == 0 {
		o.RTTs = []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	}
	if o.Runs == 0 {
		o.Runs = 3
	}
	if o.RateBps == 0 {
		o.RateBps = 250e6
	}
	if o.Queue == 0 {
		o.Queue = 2_000_000
	}
	if len(o.Profiles) == 0 {
		o.Profiles = []harness.Profile{harness.Modern, harness.Legacy}
	}
	if len(o.Conns) == 0 {
		o.Conns = []int{1, 4}
	}
	if o.CC == "" {
		o.CC = "cubic"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// FileMixRun is one fetch of the whole mix.
type FileMixRun struct {
	// Seconds is the wall time from starting curl (all at once with
	// several connections) until the last one exited.
	Seconds float64 `json:"seconds"`
	// ZeroWindows counts the segments toward the server, seen on the far
	// edge's LAN side, that advertised a zero window, out of ToServer.
	ZeroWindows int `json:"zero_windows"`
	ToServer    int `json:"to_server_segments"`
	// CaptureDropped is the packets tcpdump reported dropped.
	CaptureDropped int `json:"capture_dropped,omitempty"`
	// Connections is the TCP connections curl opened: one per chain when
	// keep-alive held.
	Connections int    `json:"connections"`
	Capture     string `json:"capture,omitempty"`
	// Files are curl's timings of each file, in request order.
	Files []MixFileTiming `json:"files,omitempty"`
}

// MixFileTiming is curl's account of one file of the mix.
type MixFileTiming = harness.FileTiming

// FileMixRow is one RTT, profile and number of connections: plain TCP through
// edges that only forward, and through a pair of wanopt edges.
type FileMixRow struct {
	RTTms   float64 `json:"rtt_ms"`
	Profile string  `json:"profile"`
	Conns   int     `json:"conns"`
	// Requests is the length of the longest chain (see FileMixIdeal).
	Requests int     `json:"requests_per_conn"`
	IdealS   float64 `json:"ideal_s"`
	// LinkFloorS is the bytes at the link rate plus one round trip.
	LinkFloorS float64 `json:"link_floor_s"`
	// PlainS and WanoptS are the median of the runs.
	PlainS  float64 `json:"plain_s"`
	WanoptS float64 `json:"wanopt_s"`
	// The zero-window segments toward the server over all the runs.
	PlainZeroWindows  int          `json:"plain_zero_windows"`
	WanoptZeroWindows int          `json:"wanopt_zero_windows"`
	PlainRuns         []FileMixRun `json:"plain_runs"`
	WanoptRuns        []FileMixRun `json:"wanopt_runs"`
}

// Ratio is wanopt's time over the ideal time (the bar: at most 1.25).
func (r FileMixRow) Ratio() float64 {
	if r.IdealS <= 0 {
		return 0
	}
	return r.WanoptS / r.IdealS
}

// FileMixResult is the whole experiment.
type FileMixResult struct {
	RateMbps     float64   `json:"rate_mbps"`
	QueueBytes   int       `json:"queue_bytes"`
	CC           string    `json:"cc"`
	Runs         int       `json:"runs"`
	EdgeArgs     []string  `json:"edge_args,omitempty"`
	Files        []MixFile `json:"files"`
	TotalBytes   int64     `json:"total_bytes"`
	IdealFormula string    `json:"ideal_formula"`
	// ZeroWindowPoint says where and which zero windows were counted.
	ZeroWindowPoint string       `json:"zero_window_point"`
	Rows            []FileMixRow `json:"rows"`
}

// nginxPort is nginx's port on the server.
const nginxPort = 80

// FileMix runs the file-mix lab (after F5's TCP-profile test) on the edges lab: curl on the client
// fetches the mix from nginx on the server over one keep-alive connection
// or several, through edges that only forward, then through fresh, warmed
// wanopt edges, counting zero windows toward the server on edgeb's lan0.
func FileMix(ctx context.Context, o FileMixOptions) (FileMixResult, error) {
	o.defaults()
	res := FileMixResult{RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.Queue, CC: o.CC, Runs: o.Runs, EdgeArgs: o.EdgeArgs,
		IdealFormula: idealFormula}
	if o.Wanopt == "" {
		return res, errors.New("no wanopt binary given (FileMixOptions.Wanopt)")
	}
	for _, n := range o.Conns {
		if n < 1 || n > len(mixKiB) {
			return res, fmt.Errorf("%d connections: want 1 to %d (one file each at least)", n, len(mixKiB))
		}
	}
	for _, tool := range []struct{ cmd, pkg string }{{"nginx", "nginx"}, {"curl", "curl"}, {"tcpdump", "tcpdump"}} {
		if _, err := exec.LookPath(tool.cmd); err != nil {
			return res, fmt.Errorf("%s not found: apt-get install %s", tool.cmd, tool.pkg)
		}
	}
	for _, rtt := range o.RTTs {
		if _, err := wanem.NewPipe(fileMixLink(o, rtt)); err != nil {
			return res, fmt.Errorf("link at RTT %v: %w", rtt, err)
		}
	}
	www, err := os.MkdirTemp("", "wanbench-f5-")
	if err != nil {
		return res, fmt.Errorf("folder for the file mix: %w", err)
	}
	defer os.RemoveAll(www)
	// MkdirTemp makes it 0700; the workers need to reach the files.
	if err := os.Chmod(www, 0o755); err != nil {
		return res, err
	}
	root := filepath.Join(www, "www")
	if err := os.Mkdir(root, 0o755); err != nil {
		return res, fmt.Errorf("folder for the file mix: %w", err)
	}
	if res.Files, err = WriteMixFiles(root); err != nil {
		return res, err
	}
	res.TotalBytes = totalSize(res.Files)
	capDir := o.CaptureDir
	if capDir == "" {
		capDir = filepath.Join(www, "captures")
	}
	l, closeLab, err := harness.BuildEdgesLab(ctx, o.CC, o.LinkCommand, o.Logger)
	if err != nil {
		return res, err
	}
	defer closeLab()
	res.ZeroWindowPoint = fmt.Sprintf("segments to %s (the server) with window 0, RSTs aside, on %s's lan0 (the far edge's LAN side): the client's with plain TCP, the far edge's with wanopt", l.Server.Addr, l.EdgeB.Role)
	srv, err := harness.StartNginx(ctx, l, www, root, nginxPort)
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	f := &fileMixLab{l: l, o: o, files: res.Files, capDir: capDir, total: len(o.RTTs) * len(o.Profiles) * len(o.Conns) * 2 * o.Runs}
	for _, rtt := range o.RTTs {
		if err := l.StartLink(ctx, fileMixLink(o, rtt), fileMixLinkBA(o, rtt)); err != nil {
			return res, err
		}
		var rows []FileMixRow
		for _, prof := range o.Profiles {
			for _, n := range o.Conns {
				row := FileMixRow{RTTms: ms(rtt), Profile: prof.Name, Conns: n, Requests: len(mixChains(res.Files, n)[0])}
				row.IdealS = FileMixIdeal(res.TotalBytes, float64(o.RateBps), rtt, row.Requests)
				row.LinkFloorS = FileMixIdeal(res.TotalBytes, float64(o.RateBps), rtt, 1)
				if row.PlainRuns, err = f.measure(ctx, rtt, prof, &row, "plain", nil); err != nil {
					return res, err
				}
				rows = append(rows, row)
			}
		}
		for i := 0; i < len(rows); i += len(o.Conns) {
			if err := f.wanopt(ctx, rtt, profileOf(o.Profiles, rows[i].Profile), rows[i:i+len(o.Conns)]); err != nil {
				return res, fmt.Errorf("rtt %v profile %s through wanopt: %w", rtt, rows[i].Profile, err)
			}
		}
		for i := range rows {
			rows[i].summarise()
		}
		res.Rows = append(res.Rows, rows...)
		st := l.StopLink()
		o.Logger.Debug("link counters", "rtt", rtt, "ab", st.AB, "ba", st.BA)
	}
	return res, nil
}

// fileMixLink is the link's client-to-server direction at rtt.
func fileMixLink(o FileMixOptions, rtt time.Duration) wanem.Config {
	return wanem.Config{Delay: rtt / 2, RateBps: o.RateBps, QueueBytes: o.Queue, Seed: 1}
}

// fileMixLinkBA is the other direction; only the seed differs.
func fileMixLinkBA(o FileMixOptions, rtt time.Duration) wanem.Config {
	c := fileMixLink(o, rtt)
	c.Seed = 2
	return c
}

// summarise fills in the row's medians and zero-window totals.
func (r *FileMixRow) summarise() {
	r.PlainS, r.PlainZeroWindows = runsSummary(r.PlainRuns)
	r.WanoptS, r.WanoptZeroWindows = runsSummary(r.WanoptRuns)
}

// runsSummary is the median time of the runs and their zero windows in all.
func runsSummary(runs []FileMixRun) (medianS float64, zeroWindows int) {
	if len(runs) == 0 {
		return 0, 0
	}
	s := make([]float64, len(runs))
	for i, r := range runs {
		s[i] = r.Seconds
		zeroWindows += r.ZeroWindows
	}
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2, zeroWindows
	}
	return s[len(s)/2], zeroWindows
}

// fileMixLab is one FileMix experiment's lab with nginx running.
type fileMixLab struct {
	l      *lab.Lab
	o      FileMixOptions
	files  []MixFile
	capDir string
	done   int
	total  int
}

// wanopt measures rows (one profile, every connection count) through a
// fresh pair of wanopt edges, warmed by one fetch of the largest file.
func (f *fileMixLab) wanopt(ctx context.Context, rtt time.Duration, prof harness.Profile, rows []FileMixRow) error {
	edges, err := harness.StartEdges(ctx, f.l, harness.EdgeOptions{Wanopt: f.o.Wanopt, Allow: []string{fmt.Sprintf("%s/32:%d", f.l.Server.Addr, nginxPort)}, Args: f.o.EdgeArgs})
	if err != nil {
		return err
	}
	defer edges.Stop()
	if err := harness.ApplyTCP(ctx, f.l, f.o.CC, prof); err != nil {
		return err
	}
	largest := slices.MaxFunc(f.files, func(a, b MixFile) int { return int(a.Size - b.Size) })
	if _, err := f.fetch(ctx, [][]MixFile{{largest}}, fetchTimeout(f.o, largest.Size, rtt, 1)); err != nil {
		return fmt.Errorf("warming fetch: %w", err)
	}
	if err := edges.WaitNoFlows(10 * time.Second); err != nil {
		return err
	}
	for i := range rows {
		if rows[i].WanoptRuns, err = f.measure(ctx, rtt, prof, &rows[i], "wanopt", edges); err != nil {
			return err
		}
	}
	return edges.Stop()
}

// fetch downloads the chains of files from nginx (see harness.Fetch).
func (f *fileMixLab) fetch(ctx context.Context, chains [][]MixFile, timeout time.Duration) (FileMixRun, error) {
	fr, err := harness.Fetch(ctx, f.l, nginxPort, chains, timeout)
	return FileMixRun{Seconds: fr.Seconds, Connections: fr.Connections, Files: fr.Files}, err
}

// fetchTimeout bounds one fetch: the bytes at a twelfth of the link (see
// RunTimeout) plus three round trips per request.
func fetchTimeout(o FileMixOptions, bytes int64, rtt time.Duration, requests int) time.Duration {
	return harness.RunTimeout(bytes, float64(o.RateBps)) + 3*time.Duration(requests)*rtt
}

// measure runs the row's fetches on one path, each captured on the far
// edge's LAN side, waiting for the edges' flows to close between runs.
func (f *fileMixLab) measure(ctx context.Context, rtt time.Duration, prof harness.Profile, row *FileMixRow, what string, edges *harness.Edges) ([]FileMixRun, error) {
	var runs []FileMixRun
	for i := range f.o.Runs {
		if err := harness.ApplyTCP(ctx, f.l, f.o.CC, prof); err != nil {
			return nil, err
		}
		path := filepath.Join(f.capDir, fmt.Sprintf("f5-%gms-%s-%dconn-%s-%d.pcap", row.RTTms, row.Profile, row.Conns, what, i+1))
		c, err := harness.StartCapture(ctx, f.l, f.l.EdgeB, "lan0", path)
		if err != nil {
			return nil, err
		}
		r, err := f.fetch(ctx, mixChains(f.files, row.Conns), fetchTimeout(f.o, totalSize(f.files), rtt, row.Requests))
		if cerr := c.Stop(); err == nil {
			err = cerr
		}
		r.CaptureDropped = c.Dropped()
		if err == nil {
			r.ZeroWindows, r.ToServer, err = harness.CountZeroWindows(path, f.l.Server.Addr)
		}
		if err != nil {
			return nil, fmt.Errorf("rtt %gms profile %s, %d connections, %s run %d: %w", row.RTTms, row.Profile, row.Conns, what, i+1, err)
		}
		if f.o.CaptureDir != "" {
			r.Capture = path
		} else {
			_ = os.Remove(path)
		}
		runs = append(runs, r)
		f.done++
		if f.o.Progress != nil {
			f.o.Progress(f.done, f.total, *row, what, r)
		}
		if edges != nil {
			if err := edges.WaitNoFlows(10 * time.Second); err != nil {
				return nil, err
			}
		}
	}
	return runs, nil
}

// Markdown renders the experiment as a markdown table.
func (r FileMixResult) Markdown() string {
	t := report.NewTable(report.Num("RTT ms"), report.Text("profile"), report.Num("connections"), report.Num("requests each"), report.Num("ideal s"),
		report.Num("plain TCP s"), report.Num("wanopt s"), report.Num("wanopt / ideal"), report.Num("plain / ideal"), report.Num("zero windows plain"),
		report.Num("zero windows wanopt"), report.Num("plain runs min–max (n)"), report.Num("wanopt runs min–max (n)"))
	for _, row := range r.Rows {
		plainRatio := 0.0
		if row.IdealS > 0 {
			plainRatio = row.PlainS / row.IdealS
		}
		t.Addf("%.0f | %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %d | %s | %s", row.RTTms, row.Profile, row.Conns, row.Requests,
			row.IdealS, row.PlainS, row.WanoptS, row.Ratio(), plainRatio, row.PlainZeroWindows, row.WanoptZeroWindows,
			fetchSpread(row.PlainRuns), fetchSpread(row.WanoptRuns))
	}
	var b strings.Builder
	t.WriteTo(&b)
	fmt.Fprintf(&b, "\nSeconds: the median of the runs, from starting curl to the last file. %s. Zero windows: over all the runs, %s.\n", r.IdealFormula, r.ZeroWindowPoint)
	dropped := 0
	for _, row := range r.Rows {
		for _, run := range slices.Concat(row.PlainRuns, row.WanoptRuns) {
			dropped += run.CaptureDropped
		}
	}
	if dropped > 0 {
		fmt.Fprintf(&b, "The captures lost %d packets in all (tcpdump's count): zero windows among them are not counted.\n", dropped)
	}
	return b.String()
}

// fetchSpread shows the fastest and slowest run and how many there were.
func fetchSpread(runs []FileMixRun) string {
	if len(runs) == 0 {
		return "–"
	}
	lo, hi := runs[0].Seconds, runs[0].Seconds
	for _, r := range runs {
		lo, hi = min(lo, r.Seconds), max(hi, r.Seconds)
	}
	return fmt.Sprintf("%.2f–%.2f (%d)", lo, hi, len(runs))
}

// Line is the closing key=value summary for the last row measured.
func (r FileMixResult) Line() string {
	if len(r.Rows) == 0 {
		return "rtt_ms=0 profile= plain_s=0 wanopt_s=0 ideal_s=0 zero_windows=0 conns=0"
	}
	row := r.Rows[len(r.Rows)-1]
	return fmt.Sprintf("rtt_ms=%.0f profile=%s plain_s=%.2f wanopt_s=%.2f ideal_s=%.2f zero_windows=%d conns=%d",
		row.RTTms, row.Profile, row.PlainS, row.WanoptS, row.IdealS, row.WanoptZeroWindows, row.Conns)
}

// WriteFiles writes f5.json, f5.md and f5.png into dir.
func (r FileMixResult) WriteFiles(dir string) error {
	return report.Write(dir, "f5", r, r.Markdown(), r.Chart())
}

// Chart draws one panel per connection count: seconds against RTT per
// path and profile, and the ideal time.
func (r FileMixResult) Chart() *report.Chart {
	var conns []int
	for _, row := range r.Rows {
		if !slices.Contains(conns, row.Conns) {
			conns = append(conns, row.Conns)
		}
	}
	if len(conns) == 0 {
		conns = []int{1}
	}
	yMax, xMax := 1.0, 200.0
	for _, row := range r.Rows {
		yMax = max(yMax, row.PlainS, row.WanoptS, row.IdealS*1.25)
		xMax = max(xMax, row.RTTms)
	}
	c := &report.Chart{Width: 6, Height: 5, Tiled: true}
	for _, n := range conns {
		what := "one keep-alive connection"
		if n > 1 {
			what = fmt.Sprintf("%d connections in parallel", n)
		}
		p := report.Panel{
			Title:  fmt.Sprintf("%.0f MiB in %d files over %s, %.0f Mbit/s", float64(r.TotalBytes)/(1<<20), len(r.Files), what, r.RateMbps),
			XLabel: "RTT (ms)", YLabel: "seconds to fetch all",
			XMin: -10, XMax: xMax + 10, YMin: 0, YMax: yMax * 1.08, XStep: 50, LegendTop: true, LegendLeft: true,
		}
		lines := map[string][]report.XY{}
		var keys []string
		for _, row := range r.Rows {
			if row.Conns != n {
				continue
			}
			for _, s := range []struct {
				key string
				y   float64
			}{{"wanopt|" + row.Profile, row.WanoptS}, {"plain TCP|" + row.Profile, row.PlainS}, {"ideal|", row.IdealS}, {"bar: 1.25 × ideal|", 1.25 * row.IdealS}} {
				if _, ok := lines[s.key]; !ok {
					keys = append(keys, s.key)
				}
				lines[s.key] = appendPoint(lines[s.key], row.RTTms, s.y)
			}
		}
		for _, k := range keys {
			name, prof, _ := strings.Cut(k, "|")
			// Points too: a single RTT makes no line.
			s := report.Series{Name: name, Points: lines[k], Color: color.Gray{Y: 90}}
			switch {
			case prof != "":
				if c, ok := profileColors[prof]; ok {
					s.Color = c
				}
				s.Name = fmt.Sprintf("%s (%s endpoints)", name, prof)
				if name != "wanopt" {
					s.Dashes, s.Glyph = []float64{6, 3}, report.Box
				}
			case name != "ideal":
				s.Width, s.Dashes, s.Glyph = 1, []float64{2, 3}, report.Cross
			}
			p.Series = append(p.Series, s)
		}
		c.Panels = append(c.Panels, p)
	}
	return c
}

// appendPoint adds (x, y) to a line, once per x.
func appendPoint(xys []report.XY, x, y float64) []report.XY {
	for _, p := range xys {
		if p.X == x {
			return xys
		}
	}
	return append(xys, report.XY{X: x, Y: y})
}
