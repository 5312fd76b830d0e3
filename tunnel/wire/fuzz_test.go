package wire

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var writeCorpus = flag.Bool("wire.write-corpus", false,
	"write the seed corpus of the fuzz targets to testdata/fuzz")

// sentinels are the errors every parse error must wrap one of.
var sentinels = []error{ErrTruncated, ErrUnknownPacket, ErrUnknownFrame, ErrAckRange,
	ErrTooManyAckRanges, ErrStreamOffset, ErrReasonTooLong, ErrAddress}

func checkSentinel(t *testing.T, err error) {
	t.Helper()
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %v wraps no sentinel", err)
}

// headerSeeds returns one valid packet of every type and a few bad ones.
func headerSeeds() map[string][]byte {
	seeds := map[string][]byte{
		"empty":        {},
		"unknown_type": {0x14, 1, 2, 3, 4, 5, 6, 7, 8},
		"short_data":   {0x13, 1, 2, 3, 4, 5},
	}
	for _, h := range []Header{
		{Type: PacketHandshakeInit, SenderIndex: 0x11223344},
		{Type: PacketHandshakeResp, SenderIndex: 0x11223344, ReceiverIndex: 0x55667788},
		{Type: PacketReject, SenderIndex: 0x55667788},
		{Type: PacketData, ReceiverIndex: 1, PacketNumber: 0x2a, PNLen: 1},
		{Type: PacketData, ReceiverIndex: 2, PacketNumber: 0x9b32, PNLen: 2},
		{Type: PacketData, ReceiverIndex: 3, PacketNumber: 0xace8fe, PNLen: 3},
		{Type: PacketData, ReceiverIndex: 4, PacketNumber: 0xa82f9b32, PNLen: 4},
	} {
		name := strings.ToLower(h.Type.String())
		if h.Type == PacketData {
			name += fmt.Sprint(h.PNLen)
		}
		seeds[name] = append(AppendHeader(nil, &h), "payload"...)
	}
	return seeds
}

func FuzzParseHeader(f *testing.F) {
	for _, s := range headerSeeds() {
		f.Add(s, uint64(0xa82f30ea))
	}
	f.Fuzz(func(t *testing.T, pkt []byte, largest uint64) {
		h, off, err := ParseHeader(pkt)
		if err != nil {
			checkSentinel(t, err)
			return
		}
		if off != h.Len() || off > len(pkt) {
			t.Fatalf("payload offset %d, header length %d, packet %d", off, h.Len(), len(pkt))
		}
		if enc := AppendHeader(nil, &h); !bytes.Equal(enc, pkt[:off]) {
			t.Fatalf("re-encoded %x, want %x", enc, pkt[:off])
		}
		if h.Type != PacketData {
			return
		}
		largest %= MaxVarint + 1
		nbits := 8 * h.PNLen
		pn := DecodePacketNumber(largest, h.PacketNumber, nbits)
		if pn&(1<<nbits-1) != h.PacketNumber || pn > MaxVarint {
			t.Fatalf("decoded %#x from %#x/%d bits at largest %#x", pn, h.PacketNumber, nbits, largest)
		}
		// The decoded number is the candidate nearest to largest+1.
		expected := largest + 1
		dist := max(pn, expected) - min(pn, expected)
		if dist > 1<<(nbits-1) && pn+(1<<nbits) <= MaxVarint && pn >= 1<<nbits {
			t.Fatalf("decoded %#x is %#x from expected %#x", pn, dist, expected)
		}
	})
}

// frameSeeds returns payloads: every sample frame alone, all of them in one
// packet, and some malformed ones.
func frameSeeds() map[string][]byte {
	seeds := map[string][]byte{
		"unknown_type":      {0x01, 0x06},
		"ack_below_zero":    {0x02, 0x05, 0x00, 0x01, 0x00, 0x04, 0x00},
		"stream_offset_max": {0x0e, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x78},
		"stream_open_bad":   {0x20, 0x05, 0x06, 0x05, 0, 0, 0, 0, 0, 0, 0},
	}
	var all, last []byte
	for _, s := range sampleFrames() {
		enc := s.f.Append(nil)
		seeds["frame_"+strings.ReplaceAll(s.name, " ", "_")] = enc
		if s.toEnd {
			last = enc
			continue
		}
		all = append(all, enc...)
	}
	seeds["packet_all_frames"] = append(all, last...)
	return seeds
}

func FuzzParseFrames(f *testing.F) {
	for _, s := range frameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		orig := bytes.Clone(payload)
		frames, err := collect(payload)
		if err != nil {
			checkSentinel(t, err)
		}
		if !bytes.Equal(payload, orig) {
			t.Fatal("parsing modified the payload")
		}
		// Whatever parsed re-encodes, no longer than it was (varints
		// re-encode in their shortest form), and re-parses to the same
		// frames.
		var enc []byte
		for _, fr := range frames {
			n := len(enc)
			enc = fr.f.Append(enc)
			if len(enc)-n != fr.f.EncodedLen() {
				t.Fatalf("%v: EncodedLen %d, wrote %d", fr.typ, fr.f.EncodedLen(), len(enc)-n)
			}
		}
		if len(enc) > len(payload) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(payload), len(enc))
		}
		again, err := collect(enc)
		if err != nil {
			t.Fatalf("re-encoded frames fail to parse: %v", err)
		}
		if len(again) != len(frames) {
			t.Fatalf("re-parsed %d frames, want %d", len(again), len(frames))
		}
		for i := range frames {
			if again[i].typ != frames[i].typ || !frameEqual(again[i].f, frames[i].f) {
				t.Fatalf("frame %d: re-parsed %+v, want %+v", i, again[i].f, frames[i].f)
			}
		}
	})
}

// ackSpecSeeds returns range specifications for FuzzAckRanges: pairs of
// (gap, length) bytes.
func ackSpecSeeds() map[string][]byte {
	many := make([]byte, 2*MaxAckRanges+4)
	for i := range many {
		many[i] = byte(i % 7)
	}
	return map[string][]byte{
		"one_range":   {},
		"few_ranges":  {0, 3, 10, 0, 200, 50},
		"many_ranges": many,
		"to_zero":     {255, 255, 255, 255},
	}
}

func FuzzAckRanges(f *testing.F) {
	for _, s := range ackSpecSeeds() {
		f.Add(uint64(1000), uint64(25), uint64(3), s)
		f.Add(uint64(MaxVarint), uint64(0), uint64(0), s)
	}
	f.Fuzz(func(t *testing.T, largest, first, delay uint64, spec []byte) {
		// Build a valid frame from the inputs: the first range, then one
		// range per (gap, length) pair while packet numbers last.
		largest %= MaxVarint + 1
		first %= largest + 1
		a := AckFrame{AckDelay: delay % (MaxVarint + 1), Ranges: []AckRange{{largest - first, largest}}}
		for i := 0; i+1 < len(spec) && len(a.Ranges) < MaxAckRanges; i += 2 {
			gap, length := uint64(spec[i])<<(spec[i]%5), uint64(spec[i+1])
			prev := a.Ranges[len(a.Ranges)-1].Smallest
			if prev < gap+2 || prev-gap-2 < length {
				break
			}
			hi := prev - gap - 2
			a.Ranges = append(a.Ranges, AckRange{hi - length, hi})
		}
		if len(spec)%3 == 0 {
			a.ECN, a.ECT0, a.ECT1, a.CE = true, uint64(len(spec)), delay%1000, largest
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("built an invalid frame: %v", err)
		}
		enc := a.Append(nil)
		if len(enc) != a.EncodedLen() {
			t.Fatalf("EncodedLen %d, wrote %d", a.EncodedLen(), len(enc))
		}
		frames, err := collect(enc)
		if err != nil || len(frames) != 1 || !frameEqual(frames[0].f, &a) {
			t.Fatalf("round trip of %+v: %+v, %v", a, frames, err)
		}
		got := frames[0].f.(*AckFrame)
		for _, pn := range []uint64{largest, largest - first, 0, a.Ranges[len(a.Ranges)-1].Smallest} {
			if got.Acks(pn) != a.Acks(pn) {
				t.Fatalf("Acks(%d) differs", pn)
			}
		}

		// Parse spec itself as an ACK body: any frame that parses is valid,
		// within MaxAckRanges and consistent with Acks.
		frames, err = collect(append([]byte{byte(FrameAck) | byte(len(spec)&1)}, spec...))
		if err != nil {
			checkSentinel(t, err)
		}
		for _, fr := range frames {
			ack, ok := fr.f.(*AckFrame)
			if !ok {
				continue
			}
			if err := ack.Validate(); err != nil {
				t.Fatalf("parsed an invalid ACK %+v: %v", ack, err)
			}
			for _, r := range ack.Ranges {
				if !ack.Acks(r.Smallest) || !ack.Acks(r.Largest) || (r.Smallest > 0 && ack.Acks(r.Smallest-1)) {
					t.Fatalf("Acks disagrees with range %+v", r)
				}
			}
		}
	})
}

// TestWriteFuzzCorpus writes the seeds above as files in Go's corpus format
// into testdata/fuzz, so that plain `go test` runs them and fuzzing starts
// from them. Run: go test -run TestWriteFuzzCorpus -wire.write-corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("pass -wire.write-corpus to write testdata/fuzz")
	}
	write := func(target, name string, values ...any) {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, v := range values {
			switch v := v.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case uint64:
				fmt.Fprintf(&b, "uint64(%d)\n", v)
			}
		}
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "seed_"+name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range headerSeeds() {
		write("FuzzParseHeader", name, s, uint64(0xa82f30ea))
	}
	for name, s := range frameSeeds() {
		write("FuzzParseFrames", name, s)
	}
	for name, s := range ackSpecSeeds() {
		write("FuzzAckRanges", name, uint64(1000), uint64(25), uint64(3), s)
	}
}
