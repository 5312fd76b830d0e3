package analyze

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGzipCapture(t *testing.T) {
	for _, name := range []string{"loss-limited.pcap", "zero-window.pcapng"} {
		plain := readTestdata(t, name)
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(plain)
		zw.Close()
		a, err := Analyze(bytes.NewReader(plain), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Analyze(&z, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(b.Stats.Format, "+gzip") || a.Stats.Packets != b.Stats.Packets || a.Flows[0].Verdict != b.Flows[0].Verdict {
			t.Errorf("%s: gzip gives %+v, plain %+v", name, b.Stats, a.Stats)
		}
	}
}

// TestTruncatedCaptures cuts every capture at many points: the analysis
// must report what it read and say the file is damaged, never fail.
func TestTruncatedCaptures(t *testing.T) {
	for _, tc := range testCaptures {
		b := readTestdata(t, tc.file)
		for _, cut := range []int{30, 1001, len(b)/2 + 1, len(b) - 1} { // never on a record boundary in these files
			rep, err := Analyze(bytes.NewReader(b[:cut]), Options{})
			if err != nil {
				if cut >= 64 {
					t.Errorf("%s cut at %d: %v", tc.file, cut, err)
				}
				continue
			}
			if rep.Stats.ReadError == "" {
				t.Errorf("%s cut at %d: no read error reported", tc.file, cut)
			}
		}
	}
}

func TestNotACapture(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("GET / HTTP/1.1\r\n"), {0x1f, 0x8b, 0, 0}} {
		if _, err := Analyze(bytes.NewReader(b), Options{}); err == nil {
			t.Errorf("%q accepted", b)
		}
	}
	_, err := Analyze(strings.NewReader("hello world, not pcap"), Options{})
	if !errors.Is(err, ErrNotCapture) {
		t.Errorf("error %v is not ErrNotCapture", err)
	}
}

// TestCorruptPCAPNG damages block lengths and captured lengths: the guard
// must stop the read with an error rather than let the reader allocate or
// read past the block.
func TestCorruptPCAPNG(t *testing.T) {
	orig := readTestdata(t, "zero-window.pcapng")
	shb := binary.LittleEndian.Uint32(orig[4:8])
	idb := shb + binary.LittleEndian.Uint32(orig[shb+4:])
	epb := idb // first enhanced packet block
	for _, tc := range []struct {
		name string
		off  uint32
		val  uint32
	}{
		{"huge block", epb + 4, 0xfffffff0},
		{"tiny block", epb + 4, 8},
		{"odd block", epb + 4, 61},
		{"caplen past block", epb + 20, 5000},
		{"huge caplen", epb + 20, 0xffffffff},
		{"bad interface", epb + 8, 7},
		{"tiny idb", shb + 4, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), orig...)
			binary.LittleEndian.PutUint32(b[tc.off:], tc.val)
			rep, err := Analyze(bytes.NewReader(b), Options{})
			if err != nil {
				return // rejected up front: fine
			}
			if rep.Stats.ReadError == "" {
				t.Errorf("no error reported (%+v)", rep.Stats)
			}
		})
	}
}

func TestPcapHugeCaplen(t *testing.T) {
	b := append([]byte(nil), readTestdata(t, "window-limited.pcap")...)
	binary.LittleEndian.PutUint32(b[24+8:], 0x7fffffff) // first record's captured length
	binary.LittleEndian.PutUint32(b[24+12:], 0x7fffffff)
	rep, err := Analyze(bytes.NewReader(b), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stats.ReadError == "" || rep.Stats.Packets != 0 {
		t.Errorf("huge caplen not rejected: %+v", rep.Stats)
	}
}

// TestHugeSnaplenBounded: a corrupt snap length in a pcapng interface block
// must not make the reader allocate gigabytes (found by fuzzing).
func TestHugeSnaplenBounded(t *testing.T) {
	b := append([]byte(nil), readTestdata(t, "zero-window.pcapng")...)
	shb := binary.LittleEndian.Uint32(b[4:8])
	binary.LittleEndian.PutUint32(b[shb+12:], 0xffffff00)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rep, err := Analyze(bytes.NewReader(b), Options{})
	runtime.ReadMemStats(&after)
	if err != nil || len(rep.Flows) != 1 {
		t.Fatalf("err %v, %+v", err, rep)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 32<<20 {
		t.Errorf("allocated %d MB for a 100 kB capture", d>>20)
	}
}

// TestPCAPNGMixedLinkTypes writes one flow's packets alternately through an
// Ethernet and a raw-IP interface of one pcapng section: every packet must
// be decoded with its own interface's link type.
func TestPCAPNGMixedLinkTypes(t *testing.T) {
	pk := simulate(simParams{total: 64 << 10, mss: 1448, rtt: 20 * ms1, rateBps: 100e6, rcvBuf: 1 << 20, wscale: 5, cwnd: 1 << 20})
	var out bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&out, pcapgo.NgInterface{LinkType: layers.LinkTypeEthernet, TimestampResolution: 9},
		pcapgo.NgWriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := w.AddInterface(pcapgo.NgInterface{LinkType: layers.LinkTypeRaw, TimestampResolution: 9})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1e9, 0)
	for i, p := range pk {
		cs := capSpec{link: linkEthernet, client: cli4, server: srv4}
		idx := 0
		if i%2 == 1 {
			cs.link, idx = linkRaw, raw
		}
		fr, orig, err := cs.frame(p)
		if err != nil {
			t.Fatal(err)
		}
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(p.t)), CaptureLength: len(fr), Length: orig, InterfaceIndex: idx}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	rep, err := Analyze(&out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stats.TCPPackets != len(pk) || len(rep.Flows) != 1 || rep.Flows[0].Dirs[0].UniqueBytes != 64<<10 {
		t.Errorf("stats %+v, flows %d", rep.Stats, len(rep.Flows))
	}
}
