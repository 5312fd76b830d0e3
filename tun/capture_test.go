package tun

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

func ipv4Packet(n int, id byte) []byte {
	p := make([]byte, n)
	p[0] = 0x45
	p[2], p[3] = byte(n>>8), byte(n)
	p[4] = id
	p[8], p[9] = 64, 6
	copy(p[12:16], []byte{198, 18, 1, 1})
	copy(p[16:20], []byte{198, 18, 2, 2})
	return p
}

func readPcap(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if r.LinkType() != layers.LinkTypeRaw {
		t.Fatalf("%s: link type %v, want raw", path, r.LinkType())
	}
	var ids []byte
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return ids
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if ci.Length != 1000 || len(data) != ci.CaptureLength {
			t.Fatalf("%s: record length %d/%d", path, ci.CaptureLength, ci.Length)
		}
		ids = append(ids, data[4])
	}
}

// TestCaptureRotation writes 20 packets of 1000 bytes with a limit of about
// 4 packets per file and 2 rotated files kept: the newest 12 survive, in
// order, across path.2, path.1 and path.
func TestCaptureRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tun.pcap")
	c, err := NewCapture(CaptureConfig{Path: path, MaxBytes: 24 + 4*(16+1000), MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.WritePacket(time.Unix(1e9, int64(i)), ipv4Packet(1000, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	if c.Packets() != 20 {
		t.Fatalf("Packets() = %d", c.Packets())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.WritePacket(time.Now(), ipv4Packet(1000, 0)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	var got []byte
	for _, p := range []string{path + ".2", path + ".1", path} {
		got = append(got, readPcap(t, p)...)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Fatalf("%s.3 exists: more rotated files than MaxFiles", path)
	}
	want := []byte{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	if string(got) != string(want) {
		t.Fatalf("packets kept %v, want %v", got, want)
	}
}

func TestCaptureSnapLen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.pcap")
	c, err := NewCapture(CaptureConfig{Path: path, SnapLen: 60})
	if err != nil {
		t.Fatal(err)
	}
	c.WritePacket(time.Now(), ipv4Packet(1000, 1))
	c.Close()
	f, _ := os.Open(path)
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, ci, err := r.ReadPacketData()
	if err != nil || len(data) != 60 || ci.Length != 1000 {
		t.Fatalf("record: %d bytes of %d, err %v; want 60 of 1000", len(data), ci.Length, err)
	}
}

func TestCaptureBadConfig(t *testing.T) {
	if _, err := NewCapture(CaptureConfig{}); err == nil {
		t.Fatal("no path accepted")
	}
	if _, err := NewCapture(CaptureConfig{Path: "/nonexistent-dir/x.pcap"}); err == nil {
		t.Fatal("unwritable path accepted")
	}
}
