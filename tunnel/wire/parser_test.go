package wire

import (
	"bytes"
	"errors"
	"testing"
)

// buildPacket encodes a data packet holding all length-delimited sample
// frames, then fills it to size with a STREAM frame that runs to the end. It
// returns the packet, the payload offset, the frames in order and the payload
// offsets at which frames end.
func buildPacket(t testing.TB, size int) (pkt []byte, off int, want []encoder, ends []int) {
	t.Helper()
	h := Header{Type: PacketData, ReceiverIndex: 0x0a0b0c0d, PacketNumber: 123456, PNLen: 3}
	pkt = AppendHeader(make([]byte, 0, size), &h)
	off = len(pkt)
	for _, s := range sampleFrames() {
		if s.toEnd {
			continue
		}
		pkt = s.f.Append(pkt)
		want = append(want, s.f)
		ends = append(ends, len(pkt)-off)
	}
	last := &StreamFrame{StreamID: 77, Offset: 1 << 20, Fin: true, OmitLength: true}
	last.Data = bytes.Repeat([]byte{0xa5}, MaxStreamDataLen(size-len(pkt), last.StreamID, last.Offset))
	pkt = last.Append(pkt)
	if len(pkt) != size {
		t.Fatalf("packet is %d bytes, want %d", len(pkt), size)
	}
	return pkt, off, append(want, last), append(ends, len(pkt)-off)
}

func TestPacketWithManyFrames(t *testing.T) {
	pkt, off, want, ends := buildPacket(t, 1350)
	h, gotOff, err := ParseHeader(pkt)
	if err != nil || gotOff != off || h.ReceiverIndex != 0x0a0b0c0d || h.PacketNumber != 123456 {
		t.Fatalf("ParseHeader = %+v, %d, %v", h, gotOff, err)
	}
	payload := pkt[off:]
	got, err := collect(payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !frameEqual(got[i].f, want[i]) {
			t.Errorf("frame %d: got %+v, want %+v", i, got[i].f, want[i])
		}
	}

	// Cut the payload at every offset: at a frame boundary the frames
	// before it parse; anywhere else parsing fails with ErrTruncated (or, in
	// the final frame that runs to the end, yields a shorter frame).
	boundary := map[int]int{0: 0}
	for i, e := range ends {
		boundary[e] = i + 1
	}
	for cut := 0; cut < len(payload); cut++ {
		if cut > ends[len(ends)-2]+16 {
			cut = min(cut+7, len(payload)-1) // sample the long data of the last frame
		}
		frames, err := collect(payload[:cut])
		if n, ok := boundary[cut]; ok {
			if err != nil || len(frames) != n {
				t.Fatalf("cut at boundary %d: %d frames, %v; want %d", cut, len(frames), err, n)
			}
			continue
		}
		in := 0 // index of the frame the cut falls in
		for ends[in] < cut {
			in++
		}
		if _, ok := want[in].(*PaddingFrame); ok {
			if err != nil || len(frames) != in+1 {
				t.Fatalf("cut at %d in padding: %d frames, %v", cut, len(frames), err)
			}
			continue
		}
		if in == len(want)-1 {
			if err != nil && !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut at %d in the last frame: %v", cut, err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d: %d frames, err %v; want ErrTruncated", cut, len(frames), err)
		}
	}
}

func TestParserAliasesPayload(t *testing.T) {
	payload := (&StreamFrame{StreamID: 1, Data: []byte("abc")}).Append(nil)
	payload = (&PingFrame{}).Append(payload)
	var p Parser
	p.Reset(payload)
	if !p.Next() || p.Type() != FrameStream {
		t.Fatal(p.Err())
	}
	f := p.Stream()
	payload[len(payload)-2] = 'Z' // the last data byte
	if string(f.Data) != "abZ" {
		t.Errorf("Data = %q: does not alias the payload", f.Data)
	}
	// The slice's capacity ends with the data: appending to it must not
	// overwrite the PING that follows.
	_ = append(f.Data, 0xee)
	if !p.Next() || p.Type() != FramePing {
		t.Fatalf("next frame %v, %v", p.Type(), p.Err())
	}
	if p.Next() || p.Err() != nil {
		t.Fatalf("Next past the end: err %v", p.Err())
	}
}

func TestParserAccessors(t *testing.T) {
	payload := (&MaxDataFrame{Max: 5}).Append(nil)
	payload = append(payload, 0xee)
	var p Parser
	p.Reset(payload)
	if !p.Next() || p.MaxData().Max != 5 || p.Offset() != 2 {
		t.Fatalf("MAX_DATA: %v %v", p.MaxData(), p.Err())
	}
	if p.Stream().StreamID != 0 || p.Ack().Ranges != nil || p.Padding().Len != 0 {
		t.Error("accessor of another type returned a non-zero frame")
	}
	if p.Next() || !errors.Is(p.Err(), ErrUnknownFrame) {
		t.Fatalf("Next on 0xee: err %v", p.Err())
	}
	if p.MaxData().Max != 0 {
		t.Error("accessor returned a frame after Next returned false")
	}
	if p.Next() {
		t.Error("Next after an error returned true")
	}
	// Reset clears the error.
	p.Reset(payload[:2])
	if !p.Next() || p.Err() != nil {
		t.Fatalf("after Reset: %v", p.Err())
	}
}

func TestParserPaddingRuns(t *testing.T) {
	payload := []byte{0, 0, 0, 1, 0, 0x10, 0, 0}
	got, err := collect(payload)
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []FrameType{FramePadding, FramePing, FramePadding, FrameMaxData, FramePadding}
	wantPad := []int{3, 0, 1, 0, 1}
	if len(got) != len(wantTypes) {
		t.Fatalf("parsed %d frames: %+v", len(got), got)
	}
	for i, g := range got {
		if g.typ != wantTypes[i] {
			t.Errorf("frame %d: %v, want %v", i, g.typ, wantTypes[i])
		}
		if pf, ok := g.f.(*PaddingFrame); ok && pf.Len != wantPad[i] {
			t.Errorf("frame %d: padding %d, want %d", i, pf.Len, wantPad[i])
		}
	}
}

// TestHotPathAllocs proves the steady-state promise of the package: encoding
// and decoding a full STREAM packet and an ACK with 8 ranges do not allocate.
func TestHotPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	buf := make([]byte, 0, 1500)
	data := make([]byte, 1500)
	var p Parser
	if n := testing.AllocsPerRun(100, func() { streamPacketRoundTrip(&p, buf, data, 1350) }); n != 0 {
		t.Errorf("STREAM packet: %v allocs", n)
	}
	ack := ackWithRanges(8)
	if n := testing.AllocsPerRun(100, func() { ackRoundTrip(&p, buf, &ack) }); n != 0 {
		t.Errorf("ACK: %v allocs", n)
	}
}

// streamPacketRoundTrip encodes a data packet of size bytes (leaving room
// for a 16-byte AEAD tag) holding one STREAM frame, then parses it back.
func streamPacketRoundTrip(p *Parser, buf, data []byte, size int) int {
	h := Header{Type: PacketData, ReceiverIndex: 0x01020304, PacketNumber: 1 << 20, PNLen: 2}
	b := AppendHeader(buf[:0], &h)
	f := StreamFrame{StreamID: 4, Offset: 1 << 24, OmitLength: true}
	f.Data = data[:MaxStreamDataLen(size-len(b)-16, f.StreamID, f.Offset)]
	b = f.Append(b)
	b = append(b, make([]byte, 16)...) // stands for the AEAD tag

	_, off, err := ParseHeader(b)
	if err != nil {
		panic(err)
	}
	p.Reset(b[off : len(b)-16])
	n := 0
	for p.Next() {
		n += len(p.Stream().Data)
	}
	if p.Err() != nil {
		panic(p.Err())
	}
	return n
}

// ackWithRanges returns an ACK frame with n ranges of 10 packets each.
func ackWithRanges(n int) AckFrame {
	f := AckFrame{AckDelay: 1234, Ranges: make([]AckRange, n)}
	for i := range n {
		hi := uint64(1<<20 - 20*i)
		f.Ranges[i] = AckRange{hi - 9, hi}
	}
	return f
}

// ackRoundTrip encodes f and parses it back.
func ackRoundTrip(p *Parser, buf []byte, f *AckFrame) int {
	b := f.Append(buf[:0])
	p.Reset(b)
	n := 0
	for p.Next() {
		n += len(p.Ack().Ranges)
	}
	if p.Err() != nil {
		panic(p.Err())
	}
	return n
}
