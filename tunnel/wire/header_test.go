package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestHeaderEncodings(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		enc  []byte
	}{
		{"init", Header{Type: PacketHandshakeInit, SenderIndex: 0x01020304},
			[]byte{0x01, 1, 2, 3, 4}},
		{"resp", Header{Type: PacketHandshakeResp, SenderIndex: 0xa0b0c0d0, ReceiverIndex: 0x01020304},
			[]byte{0x02, 0xa0, 0xb0, 0xc0, 0xd0, 1, 2, 3, 4}},
		{"reject", Header{Type: PacketReject, SenderIndex: 0xffffffff},
			[]byte{0x03, 0xff, 0xff, 0xff, 0xff}},
		{"cookie", Header{Type: PacketCookie, ReceiverIndex: 0x01020304},
			[]byte{0x04, 1, 2, 3, 4}},
		{"data1", Header{Type: PacketData, ReceiverIndex: 7, PacketNumber: 0x2a, PNLen: 1},
			[]byte{0x10, 0, 0, 0, 7, 0x2a}},
		{"data2", Header{Type: PacketData, ReceiverIndex: 7, PacketNumber: 0x9b32, PNLen: 2},
			[]byte{0x11, 0, 0, 0, 7, 0x9b, 0x32}},
		{"data3", Header{Type: PacketData, ReceiverIndex: 7, PacketNumber: 0xace8fe, PNLen: 3},
			[]byte{0x12, 0, 0, 0, 7, 0xac, 0xe8, 0xfe}},
		{"data4", Header{Type: PacketData, ReceiverIndex: 0xdeadbeef, PacketNumber: 0xa82f9b32, PNLen: 4},
			[]byte{0x13, 0xde, 0xad, 0xbe, 0xef, 0xa8, 0x2f, 0x9b, 0x32}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AppendHeader(nil, &tt.h); !bytes.Equal(got, tt.enc) {
				t.Fatalf("AppendHeader = %x, want %x", got, tt.enc)
			}
			if got := tt.h.Len(); got != len(tt.enc) {
				t.Errorf("Len = %d, want %d", got, len(tt.enc))
			}
			pkt := append(bytes.Clone(tt.enc), "payload"...)
			h, off, err := ParseHeader(pkt)
			if err != nil || h != tt.h || off != len(tt.enc) {
				t.Fatalf("ParseHeader = %+v, %d, %v; want %+v, %d", h, off, err, tt.h, len(tt.enc))
			}
			if string(pkt[off:]) != "payload" {
				t.Errorf("payload = %q", pkt[off:])
			}
			// An empty payload is the caller's business, not a header error.
			if _, off, err := ParseHeader(tt.enc); err != nil || off != len(tt.enc) {
				t.Errorf("ParseHeader(header only) = %d, %v", off, err)
			}
			for i := range len(tt.enc) {
				if _, _, err := ParseHeader(tt.enc[:i]); !errors.Is(err, ErrTruncated) {
					t.Errorf("ParseHeader(%x) error %v, want ErrTruncated", tt.enc[:i], err)
				}
			}
		})
	}
}

func TestHeaderTruncatesPacketNumber(t *testing.T) {
	h := Header{Type: PacketData, ReceiverIndex: 1, PacketNumber: 0x1122334455, PNLen: 2}
	got, _, err := ParseHeader(AppendHeader(nil, &h))
	if err != nil || got.PacketNumber != 0x4455 {
		t.Fatalf("parsed packet number %#x, %v; want 0x4455", got.PacketNumber, err)
	}
	if full := DecodePacketNumber(0x1122334400, got.PacketNumber, 8*got.PNLen); full != 0x1122334455 {
		t.Errorf("decoded %#x, want 0x1122334455", full)
	}
}

func TestParseHeaderUnknownType(t *testing.T) {
	known := map[byte]bool{0x01: true, 0x02: true, 0x03: true, 0x04: true, 0x10: true, 0x11: true, 0x12: true, 0x13: true}
	for c := range 256 {
		pkt := append([]byte{byte(c)}, make([]byte, 20)...)
		_, _, err := ParseHeader(pkt)
		if known[byte(c)] != (err == nil) {
			t.Errorf("first byte %#02x: err %v", c, err)
		}
		if err != nil && !errors.Is(err, ErrUnknownPacket) {
			t.Errorf("first byte %#02x: err %v, want ErrUnknownPacket", c, err)
		}
	}
}

func TestAppendHeaderPanicsOnBadInput(t *testing.T) {
	for _, h := range []Header{
		{Type: PacketData, PNLen: 0},
		{Type: PacketData, PNLen: 5},
		{Type: 0x42},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendHeader(%+v) did not panic", h)
				}
			}()
			AppendHeader(nil, &h)
		}()
		if h.Len() != 0 {
			t.Errorf("Len(%+v) = %d, want 0", h, h.Len())
		}
	}
}

func TestPacketNumberLen(t *testing.T) {
	tests := []struct {
		pn, largestAcked uint64
		want             int
	}{
		{0xac5c02, 0xabe8b3, 2}, // RFC 9000 A.2: 29,519 unacked need 16 bits
		{0xace8fe, 0xabe8b3, 3}, // RFC 9000 A.2: 131,147 unacked need 18 bits
		{0, NoPacketNumber, 1},
		{126, NoPacketNumber, 1}, // 127 unacked, 8 bits
		{127, NoPacketNumber, 2}, // 128 unacked, 9 bits
		{1000, 999, 1},
		{1000 + 127, 1000, 1},
		{1000 + 128, 1000, 2},
		{1 << 40, 1<<40 - 1<<30, 4},
		{1 << 40, 0, 4}, // more than 2^31 unacked: clamped
		{5, 5, 1},       // not a valid call, but no panic and a usable length
	}
	for _, tt := range tests {
		if got := PacketNumberLen(tt.pn, tt.largestAcked); got != tt.want {
			t.Errorf("PacketNumberLen(%#x, %#x) = %d, want %d", tt.pn, tt.largestAcked, got, tt.want)
		}
	}
}

func TestDecodePacketNumber(t *testing.T) {
	tests := []struct {
		largest, truncated uint64
		nbits              int
		want               uint64
	}{
		{0xa82f30ea, 0x9b32, 16, 0xa82f9b32}, // RFC 9000 A.3
		{0xabe8b3, 0x5c02, 16, 0xac5c02},
		{0xabe8b3, 0xace8fe, 24, 0xace8fe},
		{NoPacketNumber, 0, 8, 0},
		{NoPacketNumber, 5, 8, 5},
		{0, 1, 8, 1},
		{0xff, 0x00, 8, 0x100},  // wraps forward
		{0x100, 0xff, 8, 0xff},  // a late packet, wraps back
		{0x17f, 0x00, 8, 0x200}, // expected 0x180: 0x200 is within the window
		{0x17f, 0x7f, 8, 0x17f}, // a duplicate of the largest
		{MaxVarint, 0xff, 8, 0x3fffffffffffffff},
		{MaxVarint - 1, 0x00, 8, 0x3fffffffffffff00}, // never above 2^62-1
		{MaxVarint, 0x00, 8, 0x3fffffffffffff00},
		{MaxVarint, 0x80, 8, 0x3fffffffffffff80},
		{5, 0x1234, 0, 0x1234}, // nbits out of range
	}
	for _, tt := range tests {
		if got := DecodePacketNumber(tt.largest, tt.truncated, tt.nbits); got != tt.want {
			t.Errorf("DecodePacketNumber(%#x, %#x, %d) = %#x, want %#x",
				tt.largest, tt.truncated, tt.nbits, got, tt.want)
		}
	}
}

// TestPacketNumberRoundTrip checks the property the encoding promises: a
// packet numbered with PacketNumberLen decodes to itself at a receiver whose
// largest received number lies anywhere between the sender's largest
// acknowledged number and the packet itself, or a little beyond.
func TestPacketNumberRoundTrip(t *testing.T) {
	seed := uint64(20261130)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range 20000 {
		acked := rng.Uint64N(1 << 40)
		pn := acked + 1 + rng.Uint64N(1<<uint(rng.IntN(31)))
		n := PacketNumberLen(pn, acked)
		// The receiver has seen at least acked, and at most some packets
		// sent after pn (no more than pn-acked of them).
		largest := acked + rng.Uint64N(2*(pn-acked))
		h := Header{Type: PacketData, PacketNumber: pn, PNLen: n}
		got, _, err := ParseHeader(AppendHeader(nil, &h))
		if err != nil {
			t.Fatal(err)
		}
		if full := DecodePacketNumber(largest, got.PacketNumber, 8*n); full != pn {
			t.Fatalf("seed %d case %d: pn %#x acked %#x len %d largest %#x: decoded %#x",
				seed, i, pn, acked, n, largest, full)
		}
	}
}
