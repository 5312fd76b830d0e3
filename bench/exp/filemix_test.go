package exp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/harness/labtest"
)

// TestMix: the published mix is 24 files from 16 KiB to 3 MiB, 27 MiB in
// all, and four connections each get six files and a quarter of the bytes.
func TestMix(t *testing.T) {
	files := Mix()
	if len(files) != 24 {
		t.Fatalf("%d files, want 24", len(files))
	}
	lo, hi := files[0].Size, files[0].Size
	names := map[string]bool{}
	for _, f := range files {
		lo, hi = min(lo, f.Size), max(hi, f.Size)
		if names[f.Name] {
			t.Errorf("file name %s twice", f.Name)
		}
		names[f.Name] = true
	}
	if total := totalSize(files); total != 27<<20 {
		t.Errorf("mix totals %d bytes, want 27 MiB (%d)", total, 27<<20)
	}
	if lo != 16<<10 || hi != 3<<20 {
		t.Errorf("sizes from %d to %d bytes, want 16 KiB to 3 MiB", lo, hi)
	}
	one := mixChains(files, 1)
	if len(one) != 1 || len(one[0]) != len(files) || one[0][5] != files[5] {
		t.Errorf("one connection should fetch the whole list in order, got %d chains", len(one))
	}
	four := mixChains(files, 4)
	for i, c := range four {
		if len(c) != 6 || totalSize(c) != 27<<20/4 {
			t.Errorf("connection %d: %d files, %d bytes; want 6 files and %d bytes", i+1, len(c), totalSize(c), 27<<20/4)
		}
		if c[1] != files[4+i] {
			t.Errorf("connection %d's second file is %s, want %s (file i goes to connection i mod 4)", i+1, c[1].Name, files[4+i].Name)
		}
	}
}

// TestWriteMixFiles: the files have their sizes and returned hashes, the same
// content every time (one SHA-256 is pinned), and are incompressible.
func TestWriteMixFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	fa, err := WriteMixFiles(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := WriteMixFiles(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.VerifyFiles(a, fa); err != nil {
		t.Fatal(err)
	}
	hashes := map[string]bool{}
	for i, f := range fa {
		st, err := os.Stat(filepath.Join(a, f.Name))
		if err != nil || st.Size() != f.Size {
			t.Errorf("%s: %v, want %d bytes", f.Name, err, f.Size)
		}
		if fb[i] != f {
			t.Errorf("%s differs between two writes: %+v and %+v", f.Name, f, fb[i])
		}
		if hashes[f.SHA256] {
			t.Errorf("%s has the same content as another file", f.Name)
		}
		hashes[f.SHA256] = true
	}
	if want := "86d73f37c174a64803c7af562db096a51c2362fb5008b1fe73241dc90411995f"; fa[0].SHA256 != want {
		t.Errorf("%s's SHA-256 is %s, want %s: the published mix changed", fa[0].Name, fa[0].SHA256, want)
	}
	content, err := os.ReadFile(filepath.Join(a, fa[8].Name))
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	w.Write(content)
	w.Close()
	if z.Len() < len(content) {
		t.Errorf("%s compresses from %d to %d bytes", fa[8].Name, len(content), z.Len())
	}
	// A damaged file is caught.
	content[100] ^= 1
	if err := os.WriteFile(filepath.Join(a, fa[8].Name), content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := harness.VerifyFiles(a, fa); err == nil || !strings.Contains(err.Error(), fa[8].Name) {
		t.Errorf("VerifyFiles after flipping a bit of %s: %v", fa[8].Name, err)
	}
}

func TestFileMixIdeal(t *testing.T) {
	for _, c := range []struct {
		rtt      time.Duration
		requests int
		want     float64
	}{
		// 28,311,552 bytes at 250 Mbit/s take 0.905969664 s.
		{0, 24, 0.905969664},
		{100 * time.Millisecond, 24, 0.905969664 + 2.4},
		{200 * time.Millisecond, 6, 0.905969664 + 1.2},
		{200 * time.Millisecond, 1, 0.905969664 + 0.2},
	} {
		if got := FileMixIdeal(27<<20, 250e6, c.rtt, c.requests); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("FileMixIdeal(27 MiB, 250 Mbit/s, %v, %d) = %v, want %v", c.rtt, c.requests, got, c.want)
		}
	}
}

func TestFileMixReport(t *testing.T) {
	files := Mix()
	r := FileMixResult{RateMbps: 250, QueueBytes: 2_000_000, CC: "cubic", Runs: 3, Files: files, TotalBytes: totalSize(files), IdealFormula: idealFormula,
		ZeroWindowPoint: "segments to the server on edgeb's lan0"}
	for _, c := range []struct {
		rtt     time.Duration
		conns   int
		plain   []float64
		wan     []float64
		wanZero []int
	}{
		{100 * time.Millisecond, 1, []float64{6.1, 5.9, 6.4}, []float64{3.9, 3.5, 3.6}, []int{0, 2, 1}},
		{200 * time.Millisecond, 4, []float64{4.2, 4.0}, []float64{2.3, 2.5}, []int{0, 0}},
	} {
		row := FileMixRow{RTTms: ms(c.rtt), Profile: "legacy", Conns: c.conns, Requests: len(mixChains(files, c.conns)[0])}
		row.IdealS = FileMixIdeal(r.TotalBytes, 250e6, c.rtt, row.Requests)
		for i := range c.plain {
			row.PlainRuns = append(row.PlainRuns, FileMixRun{Seconds: c.plain[i], Connections: c.conns})
		}
		for i := range c.wan {
			row.WanoptRuns = append(row.WanoptRuns, FileMixRun{Seconds: c.wan[i], ZeroWindows: c.wanZero[i], Connections: c.conns, CaptureDropped: i})
		}
		row.summarise()
		r.Rows = append(r.Rows, row)
	}
	if r.Rows[0].PlainS != 6.1 || r.Rows[0].WanoptS != 3.6 || r.Rows[0].WanoptZeroWindows != 3 {
		t.Errorf("row 1: plain %v s, wanopt %v s, %d zero windows; want the medians 6.1 and 3.6 and 3 in all", r.Rows[0].PlainS, r.Rows[0].WanoptS, r.Rows[0].WanoptZeroWindows)
	}
	if r.Rows[1].WanoptS != 2.4 || r.Rows[1].Requests != 6 {
		t.Errorf("row 2: wanopt %v s over %d requests, want 2.4 (the mean of the middle two) and 6", r.Rows[1].WanoptS, r.Rows[1].Requests)
	}
	md := r.Markdown()
	wantInTable(t, md,
		"| RTT ms | profile | connections | requests each | ideal s | plain TCP s | wanopt s | wanopt / ideal |",
		"| 100 | legacy | 1 | 24 | 3.31 | 6.10 | 3.60 | 1.09 | 1.85 | 0 | 3 | 5.90–6.40 (3) | 3.50–3.90 (3) |",
		"| 200 | legacy | 4 | 6 | 2.11 | 4.10 | 2.40 | 1.14 |",
		idealFormula,
		"The captures lost 4 packets in all", // 0+1+2 and 0+1
	)
	if got, want := r.Line(), "rtt_ms=200 profile=legacy plain_s=4.10 wanopt_s=2.40 ideal_s=2.11 zero_windows=0 conns=4"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	if got := (FileMixResult{}).Line(); !strings.HasPrefix(got, "rtt_ms=0 ") {
		t.Errorf("Line() of an empty result = %q", got)
	}
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(dir, "f5.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back FileMixResult
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Markdown() != md {
		t.Errorf("f5.json does not round-trip:\n%s", back.Markdown())
	}
	if st, err := os.Stat(filepath.Join(dir, "f5.png")); err != nil || st.Size() < 1000 {
		t.Errorf("chart missing or empty: %v", err)
	}
}

// TestFileMixLab runs a short FileMix on the lab (100 Mbit/s, 20 ms): the figures must
// respect the link and the capture must have seen traffic to the server.
func TestFileMixLab(t *testing.T) {
	labtest.NeedLab(t, "iproute2 nginx curl tcpdump", "ip", "nginx", "curl", "tcpdump")
	if testing.Short() {
		t.Skip("skipping the lab test in -short mode")
	}
	wanopt := filepath.Join(labtest.BuildCommands(t, "wanopt"), "wanopt")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Setenv(labtest.LinkEnv, "1") // the link emulator is this test binary (see TestMain)
	const rate = 100e6
	rtt := 20 * time.Millisecond
	res, err := FileMix(ctx, FileMixOptions{RTTs: []time.Duration{rtt}, Runs: 1, RateBps: rate, Profiles: []harness.Profile{harness.Modern},
		Wanopt: wanopt, LinkCommand: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if ns := netnsWithPrefix(fmt.Sprintf("wob%d-", os.Getpid())); ns != "" {
		t.Errorf("namespaces left behind: %s", ns)
	}
	if len(res.Rows) != 2 || res.TotalBytes != 27<<20 {
		t.Fatalf("want two rows (1 and 4 connections) of 27 MiB, got %d rows of %d bytes", len(res.Rows), res.TotalBytes)
	}
	floor := float64(res.TotalBytes) * 8 / rate
	for _, row := range res.Rows {
		for _, runs := range [][]FileMixRun{row.PlainRuns, row.WanoptRuns} {
			if len(runs) != 1 {
				t.Fatalf("%d connections: %d runs, want 1", row.Conns, len(runs))
			}
			r := runs[0]
			if r.Connections != row.Conns || r.ToServer == 0 {
				t.Errorf("%d connections: curl opened %d, the capture saw %d segments toward the server", row.Conns, r.Connections, r.ToServer)
			}
		}
		// Nothing beats the link; a fetch 5 times slower than the ideal
		// is broken, not slow.
		for name, s := range map[string]float64{"plain TCP": row.PlainS, "wanopt": row.WanoptS} {
			if s < floor || s > 5*row.IdealS {
				t.Errorf("%d connections, %s: %.2f s, want %.2f (the bytes at the link rate) to %.2f (5 × ideal)", row.Conns, name, s, floor, 5*row.IdealS)
			}
		}
	}
}
