package analyze

import (
	"bufio"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// TestBigCapture measures the analyser's speed on a large synthetic capture.
// It runs only when WANOPT_BIG_CAPTURE names the file to use; the file is
// written first if it does not exist (1 GiB). Never commit that file.
// WANOPT_BIG_HEADERS=1 writes headers only (like tcpdump -s 128), which
// packs many more packets into the same bytes.
//
//	WANOPT_BIG_CAPTURE=/tmp/big.pcap go test -run TestBigCapture -v ./analyze
func TestBigCapture(t *testing.T) {
	path := os.Getenv("WANOPT_BIG_CAPTURE")
	if path == "" {
		t.Skip("set WANOPT_BIG_CAPTURE=/tmp/big.pcap to run")
	}
	if _, err := os.Stat(path); err != nil {
		writeBig(t, path, 1024<<20)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := AnalyzeFile(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("%d bytes, %d packets, %d flows in %v: %.0f MB/s, %.2f Mpackets/s",
		st.Size(), rep.Stats.Packets, len(rep.Flows), el, float64(st.Size())/el.Seconds()/1e6, float64(rep.Stats.Packets)/el.Seconds()/1e6)
	if len(rep.Flows) == 0 || rep.Flows[0].Verdict.Name != VerdictPathLimited {
		t.Errorf("unexpected result: %+v", rep.Flows[0].Verdict)
	}
}

// writeBig writes full-size Ethernet frames of many path-limited flows until
// the file holds size bytes.
func writeBig(t *testing.T, path string, size int64) {
	pk := simulate(simParams{total: 3 << 20, mss: 1448, rtt: 40 * ms1, rateBps: 10e6, rcvBuf: 4 << 20, wscale: 7, cwnd: 60000, sack: true})
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w := pcapgo.NewWriterNanos(bw)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var origs []int
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var written int64
	for flow := 0; written < size; flow++ {
		cs := capSpec{link: linkEthernet, full: os.Getenv("WANOPT_BIG_HEADERS") == "", client: netip.AddrPortFrom(cli4.Addr(), uint16(10000+flow)), server: srv4}
		frames, origs = frames[:0], origs[:0]
		for _, p := range pk {
			fr, orig, err := cs.frame(p)
			if err != nil {
				t.Fatal(err)
			}
			frames, origs = append(frames, fr), append(origs, orig)
		}
		base := time.Duration(flow) * 3 * time.Second
		for i, p := range pk {
			ci := gopacket.CaptureInfo{Timestamp: t0.Add(base + time.Duration(p.t)), CaptureLength: len(frames[i]), Length: origs[i]}
			if err := w.WritePacket(ci, frames[i]); err != nil {
				t.Fatal(err)
			}
			written += int64(16 + len(frames[i]))
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
}
