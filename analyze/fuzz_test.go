package analyze

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// FuzzAnalyze feeds whole capture files (pcap, pcapng, gzipped) through the
// reader, decoder, flow tracker and both report writers. Nothing may panic
// and memory must stay bounded, whatever the bytes.
func FuzzAnalyze(f *testing.F) {
	for _, tc := range testCaptures {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			continue
		}
		f.Add(b[:min(len(b), 4096)])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Analyze(bytes.NewReader(data), Options{})
		if err != nil {
			return
		}
		if err := WriteText(io.Discard, rep); err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzPackets fuzzes the packet path directly, without a file format around
// it: the input is a link type (2 bytes) followed by frames, each preceded
// by a 2-byte length; they are decoded and fed to one flow tracker 1 ms
// apart, then reported.
func FuzzPackets(f *testing.F) {
	for _, s := range packetSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		link := uint32(binary.BigEndian.Uint16(data))
		data = data[2:]
		tr := newTracker(nil)
		var seg segment
		for n := 1; len(data) >= 2; n++ {
			l := min(int(binary.BigEndian.Uint16(data)), len(data)-2)
			frame := data[2 : 2+l]
			data = data[2+l:]
			if decode(link, frame, &seg) == decOK {
				tr.packet(&seg, int64(n)*1e6, n)
			}
		}
		rep := tr.report(Options{})
		if err := WriteText(io.Discard, rep); err != nil {
			t.Fatal(err)
		}
	})
}

// packetSeeds frames the first packets of each hand-built capture in the
// FuzzPackets input format.
func packetSeeds() [][]byte {
	var seeds [][]byte
	for _, tc := range testCaptures {
		if tc.build == nil {
			continue
		}
		pk := tc.build()
		var b []byte
		b = binary.BigEndian.AppendUint16(b, uint16(tc.spec.link))
		for _, p := range pk[:min(len(pk), 40)] {
			fr, _, err := tc.spec.frame(p)
			if err != nil {
				continue
			}
			b = binary.BigEndian.AppendUint16(b, uint16(len(fr)))
			b = append(b, fr...)
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// writeFuzzCorpus stores the seed corpus under testdata/fuzz so that plain
// 'go test' replays it and 'go test -fuzz' starts from it.
func writeFuzzCorpus() error {
	write := func(target, name string, data []byte) error {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
		return os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	for i, s := range packetSeeds() {
		if err := write("FuzzPackets", fmt.Sprintf("seed-%d", i), s); err != nil {
			return err
		}
	}
	for _, tc := range testCaptures {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			return err
		}
		b = b[:min(len(b), 3000)] // truncated mid-packet on purpose
		if err := write("FuzzAnalyze", "seed-"+tc.file, b); err != nil {
			return err
		}
		if tc.file == "loss-limited.pcap" || tc.file == "zero-window.pcapng" {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(b)
			zw.Close()
			if err := write("FuzzAnalyze", "seed-gzip-"+tc.file, z.Bytes()); err != nil {
				return err
			}
		}
	}
	return nil
}
