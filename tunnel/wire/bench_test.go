package wire

import "testing"

// BenchmarkStreamPacket encodes and decodes a full 1350-byte data packet
// holding one STREAM frame (header, frame, and room for a 16-byte tag).
func BenchmarkStreamPacket(b *testing.B) {
	buf := make([]byte, 0, 1500)
	data := make([]byte, 1500)
	var p Parser
	b.SetBytes(1350)
	b.ReportAllocs()
	for b.Loop() {
		streamPacketRoundTrip(&p, buf, data, 1350)
	}
}

// BenchmarkAck8 encodes and decodes an ACK frame with 8 ranges.
func BenchmarkAck8(b *testing.B) {
	buf := make([]byte, 0, 1500)
	f := ackWithRanges(8)
	var p Parser
	b.ReportAllocs()
	for b.Loop() {
		ackRoundTrip(&p, buf, &f)
	}
}

// BenchmarkAck64 encodes and decodes an ACK frame with MaxAckRanges ranges.
func BenchmarkAck64(b *testing.B) {
	buf := make([]byte, 0, 1500)
	f := ackWithRanges(MaxAckRanges)
	var p Parser
	b.ReportAllocs()
	for b.Loop() {
		ackRoundTrip(&p, buf, &f)
	}
}

// BenchmarkParseManyFrames parses a 1350-byte packet holding one frame of
// every type.
func BenchmarkParseManyFrames(b *testing.B) {
	pkt, off, _, _ := buildPacket(b, 1350)
	var p Parser
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		_, off2, err := ParseHeader(pkt)
		if err != nil || off2 != off {
			b.Fatal(err)
		}
		p.Reset(pkt[off:])
		for p.Next() {
		}
		if p.Err() != nil {
			b.Fatal(p.Err())
		}
	}
}
