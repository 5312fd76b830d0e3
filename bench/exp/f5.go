package exp

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image/color"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// f5MixKiB is the F5 lab's file mix: 24 files from 16 KiB to 3 MiB, 27 MiB
// in all, in request order. File i goes to connection i mod 4 with four
// connections, which gives each 6 files and a quarter of the bytes, small
// and large alternating as on a web page.
var f5MixKiB = [...]int64{
	16, 128, 64, 32,
	3072, 2048, 1536, 640,
	240, 384, 192, 352,
	1024, 3072, 3072, 2048,
	512, 256, 512, 768,
	2048, 1024, 1536, 3072,
}

// f5Seed seeds the files' content: file i is ChaCha8's output for these
// 32 bytes with the last set to i+1, reproducible and incompressible.
var f5Seed = [32]byte{'w', 'a', 'n', 'b', 'e', 'n', 'c', 'h', ' ', 'f', '5', ' ', 'f', 'i', 'l', 'e', ' ', 'm', 'i', 'x'}

// F5File is one file of the mix.
type F5File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// F5Mix returns the mix's files in request order, without their hashes
// (WriteF5Files computes those).
func F5Mix() []F5File {
	files := make([]F5File, len(f5MixKiB))
	for i, kib := range f5MixKiB {
		files[i] = F5File{Name: fmt.Sprintf("f%02d-%dk.bin", i+1, kib), Size: kib << 10}
	}
	return files
}

// f5Content is file i's content stream.
func f5Content(i int) io.Reader {
	seed := f5Seed
	seed[31] = byte(i + 1)
	return rand.NewChaCha8(seed)
}

// WriteF5Files writes the mix into dir (readable by all, for nginx's
// workers) and returns it with each file's SHA-256.
func WriteF5Files(dir string) ([]F5File, error) {
	files := F5Mix()
	for i := range files {
		path := filepath.Join(dir, files[i].Name)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("write the file mix: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(f5Content(i), files[i].Size))
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

// f5Chains deals the files to conns connections: file i to connection
// i mod conns, each fetching its share in order.
func f5Chains(files []F5File, conns int) [][]F5File {
	chains := make([][]F5File, conns)
	for i, f := range files {
		chains[i%conns] = append(chains[i%conns], f)
	}
	return chains
}

func totalSize(files []F5File) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}

// F5Ideal is the fetch's time on a link that is always full and adds only
// its delay: the bytes at the link rate plus one round trip per request of
// the longest chain (HTTP/1.1, no pipelining). Chains' waits are counted as
// if they never overlapped, so a run can beat it.
func F5Ideal(bytes int64, rateBps float64, rtt time.Duration, requests int) float64 {
	return float64(bytes)*8/rateBps + float64(requests)*rtt.Seconds()
}

// f5IdealFormula is F5Ideal in words, for the JSON and the table's note.
const f5IdealFormula = "ideal_s = 8 × bytes / link rate + RTT × requests in the longest chain (24 on one connection, 6 on each of four; four chains can fill each other's waits, so a run can beat it)"

// F5Options configure F5. Zero values take the defaults.
type F5Options struct {
	RTTs     []time.Duration // default 0, 50, 100, 200 ms
	Runs     int             // per point and path; default 3, the median reported
	RateBps  uint64          // the link's rate; default 250 Mbit/s
	Queue    int             // the link's drop-tail queue, bytes; default 2 MB
	Profiles []Profile       // default Modern and Legacy
	Conns    []int           // connections sharing the list; default 1 and 4
	CC       string          // the end hosts' congestion control; default cubic
	Wanopt   string          // the wanopt binary (see FindWanopt)
	// EdgeArgs are added to both wanopt edges' command lines.
	EdgeArgs []string
	// CaptureDir, if set, keeps every run's capture there.
	CaptureDir  string
	LinkCommand []string // starts the lab's link helper
	Logger      *slog.Logger
	// Progress, if set, is called after every run; what is "plain" or
	// "wanopt".
	Progress func(done, total int, row F5Row, what string, run F5Run)
}

func (o *F5Options) defaults() {
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
		o.Profiles = []Profile{Modern, Legacy}
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

// F5Run is one fetch of the whole mix.
type F5Run struct {
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
	Files []F5FileTiming `json:"files,omitempty"`
}

// F5FileTiming is curl's account of one file: its connection (from 0) and,
// from its request, time_starttransfer and time_total.
type F5FileTiming struct {
	Name   string  `json:"name"`
	Conn   int     `json:"conn"`
	FirstS float64 `json:"first_byte_s"`
	TotalS float64 `json:"total_s"`
}

// F5Row is one RTT, profile and number of connections: plain TCP through
// edges that only forward, and through a pair of wanopt edges.
type F5Row struct {
	RTTms   float64 `json:"rtt_ms"`
	Profile string  `json:"profile"`
	Conns   int     `json:"conns"`
	// Requests is the length of the longest chain (see F5Ideal).
	Requests int     `json:"requests_per_conn"`
	IdealS   float64 `json:"ideal_s"`
	// LinkFloorS is the bytes at the link rate plus one round trip.
	LinkFloorS float64 `json:"link_floor_s"`
	// PlainS and WanoptS are the median of the runs.
	PlainS  float64 `json:"plain_s"`
	WanoptS float64 `json:"wanopt_s"`
	// The zero-window segments toward the server over all the runs.
	PlainZeroWindows  int     `json:"plain_zero_windows"`
	WanoptZeroWindows int     `json:"wanopt_zero_windows"`
	PlainRuns         []F5Run `json:"plain_runs"`
	WanoptRuns        []F5Run `json:"wanopt_runs"`
}

// Ratio is wanopt's time over the ideal time (the bar: at most 1.25).
func (r F5Row) Ratio() float64 {
	if r.IdealS <= 0 {
		return 0
	}
	return r.WanoptS / r.IdealS
}

// F5Result is the whole experiment.
type F5Result struct {
	RateMbps     float64  `json:"rate_mbps"`
	QueueBytes   int      `json:"queue_bytes"`
	CC           string   `json:"cc"`
	Runs         int      `json:"runs"`
	EdgeArgs     []string `json:"edge_args,omitempty"`
	Files        []F5File `json:"files"`
	TotalBytes   int64    `json:"total_bytes"`
	IdealFormula string   `json:"ideal_formula"`
	// ZeroWindowPoint says where and which zero windows were counted.
	ZeroWindowPoint string  `json:"zero_window_point"`
	Rows            []F5Row `json:"rows"`
}

// f5Port is nginx's port on the server.
const f5Port = 80

// F5 runs the F5 TCP-profile lab on the edges lab: curl on the client
// fetches the mix from nginx on the server over one keep-alive connection
// or several, through edges that only forward, then through fresh, warmed
// wanopt edges, counting zero windows toward the server on edgeb's lan0.
func F5(ctx context.Context, o F5Options) (F5Result, error) {
	o.defaults()
	res := F5Result{RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.Queue, CC: o.CC, Runs: o.Runs, EdgeArgs: o.EdgeArgs,
		IdealFormula: f5IdealFormula}
	if o.Wanopt == "" {
		return res, errors.New("no wanopt binary given (F5Options.Wanopt)")
	}
	for _, n := range o.Conns {
		if n < 1 || n > len(f5MixKiB) {
			return res, fmt.Errorf("%d connections: want 1 to %d (one file each at least)", n, len(f5MixKiB))
		}
	}
	for _, tool := range []struct{ cmd, pkg string }{{"nginx", "nginx"}, {"curl", "curl"}, {"tcpdump", "tcpdump"}} {
		if _, err := exec.LookPath(tool.cmd); err != nil {
			return res, fmt.Errorf("%s not found: apt-get install %s", tool.cmd, tool.pkg)
		}
	}
	for _, rtt := range o.RTTs {
		if _, err := wanem.NewPipe(f5Link(o, rtt)); err != nil {
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
	if res.Files, err = WriteF5Files(root); err != nil {
		return res, err
	}
	res.TotalBytes = totalSize(res.Files)
	capDir := o.CaptureDir
	if capDir == "" {
		capDir = filepath.Join(www, "captures")
	}
	l, closeLab, err := buildEdgesLab(ctx, o.CC, o.LinkCommand, o.Logger)
	if err != nil {
		return res, err
	}
	defer closeLab()
	res.ZeroWindowPoint = fmt.Sprintf("segments to %s (the server) with window 0, RSTs aside, on %s's lan0 (the far edge's LAN side): the client's with plain TCP, the far edge's with wanopt", l.Server.Addr, l.EdgeB.Role)
	srv, err := startNginx(ctx, l, www, root)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	f := &f5Lab{l: l, o: o, files: res.Files, capDir: capDir, total: len(o.RTTs) * len(o.Profiles) * len(o.Conns) * 2 * o.Runs}
	for _, rtt := range o.RTTs {
		if err := l.StartLink(ctx, f5Link(o, rtt), f5LinkBA(o, rtt)); err != nil {
			return res, err
		}
		var rows []F5Row
		for _, prof := range o.Profiles {
			for _, n := range o.Conns {
				row := F5Row{RTTms: ms(rtt), Profile: prof.Name, Conns: n, Requests: len(f5Chains(res.Files, n)[0])}
				row.IdealS = F5Ideal(res.TotalBytes, float64(o.RateBps), rtt, row.Requests)
				row.LinkFloorS = F5Ideal(res.TotalBytes, float64(o.RateBps), rtt, 1)
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

// f5Link is the link's client-to-server direction at rtt.
func f5Link(o F5Options, rtt time.Duration) wanem.Config {
	return wanem.Config{Delay: rtt / 2, RateBps: o.RateBps, QueueBytes: o.Queue, Seed: 1}
}

// f5LinkBA is the other direction; only the seed differs.
func f5LinkBA(o F5Options, rtt time.Duration) wanem.Config {
	c := f5Link(o, rtt)
	c.Seed = 2
	return c
}

// summarise fills in the row's medians and zero-window totals.
func (r *F5Row) summarise() {
	r.PlainS, r.PlainZeroWindows = runsSummary(r.PlainRuns)
	r.WanoptS, r.WanoptZeroWindows = runsSummary(r.WanoptRuns)
}

// runsSummary is the median time of the runs and their zero windows in all.
func runsSummary(runs []F5Run) (medianS float64, zeroWindows int) {
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

// f5Lab is one F5 experiment's lab with nginx running.
type f5Lab struct {
	l      *lab.Lab
	o      F5Options
	files  []F5File
	capDir string
	done   int
	total  int
}

// wanopt measures rows (one profile, every connection count) through a
// fresh pair of wanopt edges, warmed by one fetch of the largest file.
func (f *f5Lab) wanopt(ctx context.Context, rtt time.Duration, prof Profile, rows []F5Row) error {
	edges, err := StartEdges(ctx, f.l, EdgeOptions{Wanopt: f.o.Wanopt, Allow: []string{fmt.Sprintf("%s/32:%d", f.l.Server.Addr, f5Port)}, Args: f.o.EdgeArgs})
	if err != nil {
		return err
	}
	defer edges.Stop()
	if err := applyTCP(ctx, f.l, f.o.CC, prof); err != nil {
		return err
	}
	largest := slices.MaxFunc(f.files, func(a, b F5File) int { return int(a.Size - b.Size) })
	if _, err := f.fetch(ctx, []F5File{largest}, 1, f5Timeout(f.o, largest.Size, rtt, 1)); err != nil {
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

// f5Timeout bounds one fetch: the bytes at a twelfth of the link (see
// runTimeout) plus three round trips per request.
func f5Timeout(o F5Options, bytes int64, rtt time.Duration, requests int) time.Duration {
	return runTimeout(bytes, float64(o.RateBps)) + 3*time.Duration(requests)*rtt
}

// measure runs the row's fetches on one path, each captured on the far
// edge's LAN side, waiting for the edges' flows to close between runs.
func (f *f5Lab) measure(ctx context.Context, rtt time.Duration, prof Profile, row *F5Row, what string, edges *Edges) ([]F5Run, error) {
	var runs []F5Run
	for i := range f.o.Runs {
		if err := applyTCP(ctx, f.l, f.o.CC, prof); err != nil {
			return nil, err
		}
		path := filepath.Join(f.capDir, fmt.Sprintf("f5-%gms-%s-%dconn-%s-%d.pcap", row.RTTms, row.Profile, row.Conns, what, i+1))
		c, err := startCapture(ctx, f.l, f.l.EdgeB, "lan0", path)
		if err != nil {
			return nil, err
		}
		r, err := f.fetch(ctx, f.files, row.Conns, f5Timeout(f.o, totalSize(f.files), rtt, row.Requests))
		if cerr := c.stop(); err == nil {
			err = cerr
		}
		r.CaptureDropped = droppedByKernel(c.stderrText())
		if err == nil {
			r.ZeroWindows, r.ToServer, err = countZeroWindows(path, f.l.Server.Addr)
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

// fetch downloads files with curl on the client, one curl per connection, all
// at once, and checks that every file arrived whole over one connection each.
func (f *f5Lab) fetch(ctx context.Context, files []F5File, conns int, timeout time.Duration) (F5Run, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// tmpfs, so that writing the files costs no disk time.
	dir, err := os.MkdirTemp("/dev/shm", "wanbench-f5-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "wanbench-f5-"); err != nil {
			return F5Run{}, fmt.Errorf("folder for the fetched files: %w", err)
		}
	}
	defer os.RemoveAll(dir)
	chains := f5Chains(files, conns)
	cmds := make([]*exec.Cmd, len(chains))
	outs := make([]*strings.Builder, len(chains))
	errs := make([]*strings.Builder, len(chains))
	for i, chain := range chains {
		args := []string{"curl", "--http1.1", "--silent", "--show-error", "--fail", "--noproxy", "*",
			"--output-dir", dir, "--remote-name-all", "--write-out", "%{http_code} %{size_download} %{num_connects} %{time_starttransfer} %{time_total} %{url_effective}\\n"}
		for _, file := range chain {
			args = append(args, fmt.Sprintf("http://%s:%d/%s", f.l.Server.Addr, f5Port, file.Name))
		}
		cmds[i] = f.l.Command(ctx, f.l.Client, args...)
		outs[i], errs[i] = &strings.Builder{}, &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], errs[i]
	}
	start := time.Now()
	for i, c := range cmds {
		if err := c.Start(); err != nil {
			for _, started := range cmds[:i] {
				_ = syscall.Kill(-started.Process.Pid, syscall.SIGKILL)
				_ = started.Wait()
			}
			return F5Run{}, fmt.Errorf("start curl in %s: %w", f.l.Client.NS, err)
		}
	}
	var waitErrs []error
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			waitErrs = append(waitErrs, fmt.Errorf("curl (connection %d of %d): %w: %s", i+1, conns, err, strings.TrimSpace(errs[i].String())))
		}
	}
	run := F5Run{Seconds: time.Since(start).Seconds()}
	if err := errors.Join(waitErrs...); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done within %v: %w", timeout, err)
		}
		return run, err
	}
	for i, chain := range chains {
		n, timings, err := checkCurlReport(outs[i].String(), chain)
		if err != nil {
			return run, fmt.Errorf("connection %d of %d: %w", i+1, conns, err)
		}
		if n != 1 {
			return run, fmt.Errorf("connection %d of %d: curl opened %d TCP connections for its %d files, want one kept alive", i+1, conns, n, len(chain))
		}
		run.Connections += n
		for _, t := range timings {
			t.Conn = i
			run.Files = append(run.Files, t)
		}
	}
	return run, verifyFiles(dir, files)
}

// checkCurlReport checks each file's status and size in curl's --write-out
// lines ("code size connects first-byte-s total-s url"); it returns the
// connections curl opened and each file's timings.
func checkCurlReport(out string, files []F5File) (connects int, timings []F5FileTiming, err error) {
	want := map[string]int64{}
	for _, f := range files {
		want[f.Name] = f.Size
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 {
			return 0, nil, fmt.Errorf("unexpected curl report line %q", sc.Text())
		}
		name := fields[5][strings.LastIndexByte(fields[5], '/')+1:]
		size, ok := want[name]
		if !ok {
			return 0, nil, fmt.Errorf("curl reports %s, which it was not asked for (or twice)", fields[5])
		}
		delete(want, name)
		got, err1 := strconv.ParseInt(fields[1], 10, 64)
		n, err2 := strconv.Atoi(fields[2])
		first, err3 := strconv.ParseFloat(fields[3], 64)
		total, err4 := strconv.ParseFloat(fields[4], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return 0, nil, fmt.Errorf("curl report line %q: %w", sc.Text(), err)
		}
		if fields[0] != "200" || got != size {
			return 0, nil, fmt.Errorf("%s: HTTP %s, %d bytes; want 200 and %d bytes", name, fields[0], got, size)
		}
		connects += n
		timings = append(timings, F5FileTiming{Name: name, FirstS: first, TotalS: total})
	}
	if len(timings) != len(files) {
		return 0, nil, fmt.Errorf("curl reported %d of %d files", len(timings), len(files))
	}
	return connects, timings, nil
}

// verifyFiles checks the SHA-256 of every file fetched into dir.
func verifyFiles(dir string, files []F5File) error {
	for _, f := range files {
		r, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			return fmt.Errorf("fetched file: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("read fetched %s: %w", f.Name, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
			return fmt.Errorf("%s arrived damaged: SHA-256 %s, want %s", f.Name, got, f.SHA256)
		}
	}
	return nil
}

var droppedRE = regexp.MustCompile(`(\d+) packets? dropped by kernel`)

// droppedByKernel reads the packets tcpdump lost from its closing report.
func droppedByKernel(stderr string) int {
	m := droppedRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// countZeroWindows counts the TCP segments sent to dst in a pcap, and those
// with a zero window (RSTs aside): zero whatever the scale, no SYN needed.
func countZeroWindows(path string, dst netip.Addr) (zero, toDst int, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("open capture: %w", err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		return 0, 0, fmt.Errorf("capture %s: %w", path, err)
	}
	opts := gopacket.DecodeOptions{Lazy: true, NoCopy: true}
	for {
		data, _, err := r.ZeroCopyReadPacketData()
		if errors.Is(err, io.EOF) {
			return zero, toDst, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("capture %s: %w", path, err)
		}
		p := gopacket.NewPacket(data, r.LinkType(), opts)
		var to netip.Addr
		switch ip := p.NetworkLayer().(type) {
		case *layers.IPv4:
			to, _ = netip.AddrFromSlice(ip.DstIP)
		case *layers.IPv6:
			to, _ = netip.AddrFromSlice(ip.DstIP)
		}
		tcp, ok := p.TransportLayer().(*layers.TCP)
		if !ok || to.Unmap() != dst {
			continue
		}
		toDst++
		if tcp.Window == 0 && !tcp.RST {
			zero++
		}
	}
}

// nginx is an nginx serving a folder from the lab's server.
type nginx struct {
	cmd    *exec.Cmd
	exited chan struct{}
	stderr strings.Builder
}

// startNginx runs nginx in the server's namespace on port f5Port, its files
// under prefix, serving root. It returns once nginx listens.
func startNginx(ctx context.Context, l *lab.Lab, prefix, root string) (*nginx, error) {
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(prefix, root, netip.AddrPortFrom(l.Server.Addr, f5Port))), 0o644); err != nil {
		return nil, fmt.Errorf("write nginx's configuration: %w", err)
	}
	n := &nginx{exited: make(chan struct{})}
	n.cmd = l.Command(ctx, l.Server, "nginx", "-p", prefix, "-c", conf, "-e", filepath.Join(prefix, "error.log"), "-g", "daemon off;")
	n.cmd.Stdout, n.cmd.Stderr = &n.stderr, &n.stderr
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx in %s: %w", l.Server.NS, err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	port := fmt.Sprintf(":%d", f5Port)
	for range 100 {
		out, _ := l.Command(ctx, l.Server, "ss", "-Htln", "sport = "+port).Output()
		if strings.Contains(string(out), port) {
			return n, nil
		}
		select {
		case <-n.exited:
			log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			return nil, fmt.Errorf("nginx in %s exited at start: %s%s", l.Server.NS, n.stderr.String(), tail(string(log), 1000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.stop()
	return nil, fmt.Errorf("nginx in %s not listening on %s after 5 s", l.Server.NS, port)
}

// stop ends nginx and its workers (one process group).
func (n *nginx) stop() {
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
}

// nginxConf is the private configuration: one worker (root, to read any
// folder) serving static files with sendfile, unlimited keep-alive
// requests, every path under prefix.
func nginxConf(prefix, root string, listen netip.AddrPort) string {
	return fmt.Sprintf(`user root;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	default_type application/octet-stream;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000;
	keepalive_timeout 300s;
	client_body_temp_path %[1]s/tmp-body;
	proxy_temp_path %[1]s/tmp-proxy;
	fastcgi_temp_path %[1]s/tmp-fastcgi;
	uwsgi_temp_path %[1]s/tmp-uwsgi;
	scgi_temp_path %[1]s/tmp-scgi;
	server {
		listen %[3]s;
		root %[2]s;
	}
}
`, prefix, root, listen)
}

// Markdown renders the experiment as a markdown table.
func (r F5Result) Markdown() string {
	var b strings.Builder
	b.WriteString("| RTT ms | profile | connections | requests each | ideal s | plain TCP s | wanopt s | wanopt / ideal | plain / ideal | zero windows plain | zero windows wanopt | plain runs min–max (n) | wanopt runs min–max (n) |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		plainRatio := 0.0
		if row.IdealS > 0 {
			plainRatio = row.PlainS / row.IdealS
		}
		fmt.Fprintf(&b, "| %.0f | %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %d | %s | %s |\n", row.RTTms, row.Profile, row.Conns, row.Requests,
			row.IdealS, row.PlainS, row.WanoptS, row.Ratio(), plainRatio, row.PlainZeroWindows, row.WanoptZeroWindows,
			f5Spread(row.PlainRuns), f5Spread(row.WanoptRuns))
	}
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

// f5Spread shows the fastest and slowest run and how many there were.
func f5Spread(runs []F5Run) string {
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
func (r F5Result) Line() string {
	if len(r.Rows) == 0 {
		return "rtt_ms=0 profile= plain_s=0 wanopt_s=0 ideal_s=0 zero_windows=0 conns=0"
	}
	row := r.Rows[len(r.Rows)-1]
	return fmt.Sprintf("rtt_ms=%.0f profile=%s plain_s=%.2f wanopt_s=%.2f ideal_s=%.2f zero_windows=%d conns=%d",
		row.RTTms, row.Profile, row.PlainS, row.WanoptS, row.IdealS, row.WanoptZeroWindows, row.Conns)
}

// WriteFiles writes f5.json, f5.md and f5.png into dir.
func (r F5Result) WriteFiles(dir string) error {
	return writeReport(dir, "f5", r, r.Markdown(), r.chart)
}

// chart draws one panel per connection count: seconds against RTT per
// path and profile, and the ideal time.
func (r F5Result) chart(path string) error {
	var conns []int
	for _, row := range r.Rows {
		if !slices.Contains(conns, row.Conns) {
			conns = append(conns, row.Conns)
		}
	}
	if len(conns) == 0 {
		conns = []int{1}
	}
	colors := map[string]color.Color{"modern": color.RGBA{R: 31, G: 119, B: 180, A: 255}, "legacy": color.RGBA{R: 214, G: 39, B: 40, A: 255}}
	yMax, xMax := 1.0, 200.0
	for _, row := range r.Rows {
		yMax = max(yMax, row.PlainS, row.WanoptS, row.IdealS*1.25)
		xMax = max(xMax, row.RTTms)
	}
	panels := make([]*plot.Plot, len(conns))
	for i, n := range conns {
		p := plot.New()
		what := "one keep-alive connection"
		if n > 1 {
			what = fmt.Sprintf("%d connections in parallel", n)
		}
		p.Title.Text = fmt.Sprintf("%.0f MiB in %d files over %s, %.0f Mbit/s", float64(r.TotalBytes)/(1<<20), len(r.Files), what, r.RateMbps)
		p.X.Label.Text = "RTT (ms)"
		p.Y.Label.Text = "seconds to fetch all"
		p.Y.Min, p.Y.Max = 0, yMax*1.08
		p.X.Min, p.X.Max = -10, xMax+10
		p.X.Tick.Marker = stepTicks(50)
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		lines := map[string]plotter.XYs{}
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
			l, pts, err := plotter.NewLinePoints(lines[k])
			if err != nil {
				return err
			}
			l.Width = vg.Points(2)
			l.Color = color.Gray{Y: 90}
			label := name
			switch {
			case prof != "":
				if c, ok := colors[prof]; ok {
					l.Color = c
				}
				label = fmt.Sprintf("%s (%s endpoints)", name, prof)
				if name != "wanopt" {
					l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
					pts.Shape = draw.BoxGlyph{}
				}
			case name != "ideal":
				l.Width = vg.Points(1)
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
				pts.Shape = draw.CrossGlyph{}
			}
			pts.Color = l.Color
			p.Add(l, pts)
			p.Legend.Add(label, l, pts)
		}
		panels[i] = p
	}
	width, height := vg.Length(len(panels))*6*vg.Inch, 5*vg.Inch
	img := vgimg.New(width, height)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter,
		PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	cs := plot.Align([][]*plot.Plot{panels}, tiles, draw.New(img))
	for i, p := range panels {
		p.Draw(cs[0][i])
	}
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(fh); err != nil {
		fh.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return fh.Close()
}

// appendPoint adds (x, y) to a line, once per x.
func appendPoint(xys plotter.XYs, x, y float64) plotter.XYs {
	for _, p := range xys {
		if p.X == x {
			return xys
		}
	}
	return append(xys, plotter.XY{X: x, Y: y})
}
