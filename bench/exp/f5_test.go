package exp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// TestF5Mix: the published mix is 24 files from 16 KiB to 3 MiB, 27 MiB in
// all, and four connections each get six files and a quarter of the bytes.
func TestF5Mix(t *testing.T) {
	files := F5Mix()
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
	one := f5Chains(files, 1)
	if len(one) != 1 || len(one[0]) != len(files) || one[0][5] != files[5] {
		t.Errorf("one connection should fetch the whole list in order, got %d chains", len(one))
	}
	four := f5Chains(files, 4)
	for i, c := range four {
		if len(c) != 6 || totalSize(c) != 27<<20/4 {
			t.Errorf("connection %d: %d files, %d bytes; want 6 files and %d bytes", i+1, len(c), totalSize(c), 27<<20/4)
		}
		if c[1] != files[4+i] {
			t.Errorf("connection %d's second file is %s, want %s (file i goes to connection i mod 4)", i+1, c[1].Name, files[4+i].Name)
		}
	}
}

// TestWriteF5Files: the files have their sizes and returned hashes, the same
// content every time (one SHA-256 is pinned), and are incompressible.
func TestWriteF5Files(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	fa, err := WriteF5Files(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := WriteF5Files(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyFiles(a, fa); err != nil {
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
	if err := verifyFiles(a, fa); err == nil || !strings.Contains(err.Error(), fa[8].Name) {
		t.Errorf("verifyFiles after flipping a bit of %s: %v", fa[8].Name, err)
	}
}

func TestF5Ideal(t *testing.T) {
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
		if got := F5Ideal(27<<20, 250e6, c.rtt, c.requests); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("F5Ideal(27 MiB, 250 Mbit/s, %v, %d) = %v, want %v", c.rtt, c.requests, got, c.want)
		}
	}
}

// TestCountZeroWindows counts the zero windows toward the server in small
// captures as tcpdump writes them on a veth and on a TUN device.
func TestCountZeroWindows(t *testing.T) {
	server := netip.MustParseAddr("198.18.2.2")
	edge := netip.MustParseAddr("198.18.2.1")
	type pkt struct {
		src, dst netip.Addr
		window   uint16
		rst      bool
		payload  int
		udp      bool
	}
	pkts := []pkt{
		{src: edge, dst: server, window: 0},                 // counted
		{src: edge, dst: server, window: 0, payload: 1400},  // counted, cut to 128 bytes
		{src: edge, dst: server, window: 0, rst: true},      // a reset: toward the server, not counted
		{src: edge, dst: server, window: 512},               // open window
		{src: server, dst: edge, window: 0},                 // toward the edge
		{src: edge, dst: server, udp: true, payload: 100},   // not TCP
		{src: edge, dst: server, window: 1, payload: 10000}, // open, large (a GRO segment)
	}
	for _, link := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw} {
		t.Run(link.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.pcap")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			w := pcapgo.NewWriter(f)
			if err := w.WriteFileHeader(captureSnapBytes, link); err != nil {
				t.Fatal(err)
			}
			for i, p := range pkts {
				ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: net.IP(p.src.AsSlice()), DstIP: net.IP(p.dst.AsSlice()), Protocol: layers.IPProtocolTCP}
				var l4 gopacket.SerializableLayer
				if p.udp {
					ip.Protocol = layers.IPProtocolUDP
					u := &layers.UDP{SrcPort: 5000, DstPort: 80}
					u.SetNetworkLayerForChecksum(ip)
					l4 = u
				} else {
					tcp := &layers.TCP{SrcPort: 54840, DstPort: 80, Seq: uint32(i), Ack: 1, ACK: !p.rst, RST: p.rst, Window: p.window}
					tcp.SetNetworkLayerForChecksum(ip)
					l4 = tcp
				}
				ls := []gopacket.SerializableLayer{ip, l4, gopacket.Payload(make([]byte, p.payload))}
				if link == layers.LinkTypeEthernet {
					eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
					ls = append([]gopacket.SerializableLayer{eth}, ls...)
				}
				buf := gopacket.NewSerializeBuffer()
				if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
					t.Fatal(err)
				}
				frame := buf.Bytes()
				ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, int64(i)), Length: len(frame), CaptureLength: min(len(frame), captureSnapBytes)}
				if err := w.WritePacket(ci, frame[:ci.CaptureLength]); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			zero, to, err := countZeroWindows(path, server)
			if err != nil {
				t.Fatal(err)
			}
			if zero != 2 || to != 5 {
				t.Errorf("%d zero windows of %d TCP segments toward the server, want 2 of 5", zero, to)
			}
		})
	}
	bad := filepath.Join(t.TempDir(), "not.pcap")
	if err := os.WriteFile(bad, []byte("not a capture at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := countZeroWindows(bad, server); err == nil {
		t.Error("a file that is no capture gave no error")
	}
}

func TestDroppedByKernel(t *testing.T) {
	for stderr, want := range map[string]int{
		"tcpdump: listening on lan0, link-type EN10MB (Ethernet), snapshot length 128 bytes\n31337 packets captured\n31400 packets received by filter\n63 packets dropped by kernel\n": 63,
		"1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n":                                                                                                0,
		"": 0,
	} {
		if got := droppedByKernel(stderr); got != want {
			t.Errorf("droppedByKernel(%q) = %d, want %d", stderr, got, want)
		}
	}
}

func TestCheckCurlReport(t *testing.T) {
	files := []F5File{{Name: "f01-16k.bin", Size: 16384}, {Name: "f05-3072k.bin", Size: 3 << 20}}
	good := "200 16384 1 0.201 0.202 http://198.18.2.2:80/f01-16k.bin\n200 3145728 0 0.200 0.310 http://198.18.2.2:80/f05-3072k.bin\n"
	n, timings, err := checkCurlReport(good, files)
	if err != nil || n != 1 {
		t.Errorf("good report: %d connections, %v; want 1 and no error", n, err)
	}
	if want := []F5FileTiming{{Name: "f01-16k.bin", FirstS: 0.201, TotalS: 0.202}, {Name: "f05-3072k.bin", FirstS: 0.2, TotalS: 0.31}}; !slices.Equal(timings, want) {
		t.Errorf("good report: timings %+v, want %+v", timings, want)
	}
	if n, _, _ := checkCurlReport(strings.Replace(good, "200 3145728 0", "200 3145728 1", 1), files); n != 2 {
		t.Errorf("a second connection: counted %d connections, want 2", n)
	}
	for name, out := range map[string]string{
		"short file":     strings.Replace(good, "3145728", "3145727", 1),
		"not found":      strings.Replace(good, "200 16384", "404 16384", 1),
		"file missing":   strings.SplitAfter(good, "\n")[0],
		"file twice":     good + strings.SplitAfter(good, "\n")[0],
		"garbled line":   "200 16384\n",
		"garbled time":   strings.Replace(good, "0.310", "0,310", 1),
		"unasked file":   strings.Replace(good, "f01-16k", "f02-128k", 1),
		"nothing at all": "",
	} {
		if _, _, err := checkCurlReport(out, files); err == nil {
			t.Errorf("%s: no error for %q", name, out)
		}
	}
}

func TestF5Report(t *testing.T) {
	files := F5Mix()
	r := F5Result{RateMbps: 250, QueueBytes: 2_000_000, CC: "cubic", Runs: 3, Files: files, TotalBytes: totalSize(files), IdealFormula: f5IdealFormula,
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
		row := F5Row{RTTms: ms(c.rtt), Profile: "legacy", Conns: c.conns, Requests: len(f5Chains(files, c.conns)[0])}
		row.IdealS = F5Ideal(r.TotalBytes, 250e6, c.rtt, row.Requests)
		for i := range c.plain {
			row.PlainRuns = append(row.PlainRuns, F5Run{Seconds: c.plain[i], Connections: c.conns})
		}
		for i := range c.wan {
			row.WanoptRuns = append(row.WanoptRuns, F5Run{Seconds: c.wan[i], ZeroWindows: c.wanZero[i], Connections: c.conns, CaptureDropped: i})
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
	for _, want := range []string{
		"| RTT ms | profile | connections | requests each | ideal s | plain TCP s | wanopt s | wanopt / ideal |",
		"| 100 | legacy | 1 | 24 | 3.31 | 6.10 | 3.60 | 1.09 | 1.85 | 0 | 3 | 5.90–6.40 (3) | 3.50–3.90 (3) |",
		"| 200 | legacy | 4 | 6 | 2.11 | 4.10 | 2.40 | 1.14 |",
		f5IdealFormula,
		"The captures lost 4 packets in all", // 0+1+2 and 0+1
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if got, want := r.Line(), "rtt_ms=200 profile=legacy plain_s=4.10 wanopt_s=2.40 ideal_s=2.11 zero_windows=0 conns=4"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	if got := (F5Result{}).Line(); !strings.HasPrefix(got, "rtt_ms=0 ") {
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
	var back F5Result
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

// TestF5Lab runs a short F5 on the lab (100 Mbit/s, 20 ms): the figures must
// respect the link and the capture must have seen traffic to the server.
func TestF5Lab(t *testing.T) {
	needLab(t, "iproute2 nginx curl tcpdump", "ip", "nginx", "curl", "tcpdump")
	if testing.Short() {
		t.Skip("skipping the lab test in -short mode")
	}
	wanopt := filepath.Join(buildCommands(t, "wanopt"), "wanopt")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Setenv(linkHelperEnv, "1") // the link helper is this test binary (see TestMain)
	const rate = 100e6
	rtt := 20 * time.Millisecond
	res, err := F5(ctx, F5Options{RTTs: []time.Duration{rtt}, Runs: 1, RateBps: rate, Profiles: []Profile{Modern},
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
		for _, runs := range [][]F5Run{row.PlainRuns, row.WanoptRuns} {
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
