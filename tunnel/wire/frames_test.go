package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, tt := range sampleFrames() {
		t.Run(tt.name, func(t *testing.T) {
			enc := tt.f.Append(nil)
			if len(enc) != tt.f.EncodedLen() {
				t.Fatalf("EncodedLen = %d, Append wrote %d bytes", tt.f.EncodedLen(), len(enc))
			}
			// Append appends: a prefix is kept intact.
			if got := tt.f.Append([]byte("prefix")); string(got[:6]) != "prefix" || !bytes.Equal(got[6:], enc) {
				t.Fatalf("Append to a prefix = %x", got)
			}
			frames, err := collect(enc)
			if err != nil {
				t.Fatalf("parse %x: %v", enc, err)
			}
			if len(frames) != 1 || !frameEqual(frames[0].f, tt.f) {
				t.Fatalf("parsed %+v, want %+v", frames, tt.f)
			}
			// Re-encoding the parsed frame gives the same bytes.
			if re := frames[0].f.Append(nil); !bytes.Equal(re, enc) {
				t.Errorf("re-encoded %x, want %x", re, enc)
			}
		})
	}
}

// TestFrameTruncation cuts every frame at every offset: a cut inside a
// length-delimited frame is always ErrTruncated; a cut inside a frame that
// runs to the end of the packet is ErrTruncated or a shorter frame.
func TestFrameTruncation(t *testing.T) {
	for _, tt := range sampleFrames() {
		if _, ok := tt.f.(*PaddingFrame); ok {
			continue // any run of zeros is valid padding
		}
		enc := tt.f.Append(nil)
		for i := 1; i < len(enc); i++ {
			frames, err := collect(enc[:i])
			if tt.toEnd && err == nil {
				sf, ok := frames[0].f.(*StreamFrame)
				df, ok2 := frames[0].f.(*DatagramFrame)
				if len(frames) != 1 || !(ok && len(sf.Data) < tt.f.EncodedLen()) && !(ok2 && len(df.Data) < tt.f.EncodedLen()) {
					t.Errorf("%s cut at %d: parsed %+v", tt.name, i, frames)
				}
				continue
			}
			if !errors.Is(err, ErrTruncated) || len(frames) != 0 {
				t.Errorf("%s cut at %d: %d frames, err %v; want ErrTruncated", tt.name, i, len(frames), err)
			}
		}
	}
}

func TestFrameEncodings(t *testing.T) {
	tests := []struct {
		name string
		f    encoder
		hex  string
	}{
		{"padding", &PaddingFrame{Len: 2}, "0000"},
		{"ping", &PingFrame{}, "01"},
		{"ack", &AckFrame{Ranges: []AckRange{{90, 100}, {50, 70}}}, "02406400010a1214"},
		{"ack ecn", &AckFrame{Ranges: []AckRange{{7, 7}}, AckDelay: 1000, ECN: true, ECT0: 1, ECT1: 2, CE: 3},
			"030743e80000010203"},
		{"reset stream", &ResetStreamFrame{StreamID: 4, Code: 2, FinalSize: 16384}, "04040280004000"},
		{"stop sending", &StopSendingFrame{StreamID: 4, Code: 1}, "050401"},
		{"stream", &StreamFrame{StreamID: 1, Data: []byte("hi")}, "0a01026869"},
		{"stream off fin to end", &StreamFrame{StreamID: 4, Offset: 64, Data: []byte("x"), Fin: true, OmitLength: true},
			"0d04404078"},
		{"stream all bits", &StreamFrame{StreamID: 4, Offset: 1, Data: []byte("x"), Fin: true}, "0f04010178"},
		{"max data", &MaxDataFrame{Max: 16384}, "1080004000"},
		{"max stream data", &MaxStreamDataFrame{StreamID: 8, Max: 63}, "11083f"},
		{"data blocked", &DataBlockedFrame{Limit: 64}, "144040"},
		{"stream data blocked", &StreamDataBlockedFrame{StreamID: 8, Limit: 0}, "150800"},
		{"close", &CloseFrame{Code: CloseProtocolViolation, Reason: []byte("x")}, "1c020178"},
		{"stream open", &StreamOpenFrame{StreamID: 5, Proto: ProtoTCP,
			Src: mustAddrPort("198.18.0.10:40000"), Dst: mustAddrPort("198.19.0.1:443")},
			"20050604c612000a9c4004c613000101bb"},
		{"stream open v6", &StreamOpenFrame{StreamID: 5, Proto: ProtoUDP,
			Src: mustAddrPort("[2001:db8::1]:53"), Dst: mustAddrPort("[::1]:1")},
			"20051110" + "20010db8000000000000000000000001" + "0035" + "10" + "00000000000000000000000000000001" + "0001"},
		{"open result", &OpenResultFrame{StreamID: 5, Code: OpenRefused}, "210501"},
		{"datagram", &DatagramFrame{Data: []byte("ab")}, "31026162"},
		{"datagram to end", &DatagramFrame{Data: []byte("ab"), OmitLength: true}, "306162"},
	}
	for _, tt := range tests {
		if got := hex.EncodeToString(tt.f.Append(nil)); got != tt.hex {
			t.Errorf("%s: encoded %s, want %s", tt.name, got, tt.hex)
		}
	}
}

func TestFrameErrors(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want error
	}{
		{"crypto type unused", "06", ErrUnknownFrame},
		{"type 0x07", "07", ErrUnknownFrame},
		{"max streams", "1200", ErrUnknownFrame},
		{"close 0x1d", "1d00", ErrUnknownFrame},
		{"type 0x22", "22", ErrUnknownFrame},
		{"type 0x3f", "3f", ErrUnknownFrame},
		{"two-byte type", "4001", ErrUnknownFrame},
		{"type 0xff", "ff", ErrUnknownFrame},
		{"after a valid frame", "0100ee", ErrUnknownFrame},
		{"ack first range below zero", "0205000006", ErrAckRange},
		{"ack gap below zero", "02050001000400", ErrAckRange},
		{"ack length below zero", "02050001000202", ErrAckRange},
		{"ack 65 ranges", "020500" + "4040" + "00", ErrTooManyAckRanges},
		{"ack huge range count", "020500" + "ffffffffffffffff" + "00", ErrTooManyAckRanges},
		{"ack missing range", "020500010000", ErrTruncated},
		{"ack ecn missing", "0305000000", ErrTruncated},
		{"stream offset overflow", "0e01ffffffffffffffff0178", ErrStreamOffset},
		{"stream offset overflow to end", "0c01ffffffffffffffff78", ErrStreamOffset},
		{"stream length past end", "0a010561", ErrTruncated},
		{"stream huge length", "0a01ffffffffffffffff61", ErrTruncated},
		{"close reason 257", "1c0041010000", ErrReasonTooLong},
		{"close huge reason", "1c00ffffffffffffffff", ErrReasonTooLong},
		{"close reason past end", "1c000561", ErrTruncated},
		{"stream open 5-byte address", "2005060500000000000000", ErrAddress},
		{"stream open bad dst", "200506000000ff", ErrAddress},
		{"stream open short address", "20050604c612", ErrTruncated},
		{"datagram length past end", "310561", ErrTruncated},
		{"max data missing value", "10", ErrTruncated},
		{"varint cut", "1180", ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatal(err)
			}
			_, err = collect(b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "wire: ") {
				t.Errorf("error %q lacks context", err)
			}
		})
	}
}

func TestAckMaxRanges(t *testing.T) {
	var f AckFrame
	for i := range MaxAckRanges {
		hi := uint64(1000 - 10*i)
		f.Ranges = append(f.Ranges, AckRange{hi - 3, hi})
	}
	frames, err := collect(f.Append(nil))
	if err != nil || len(frames) != 1 || !frameEqual(frames[0].f, &f) {
		t.Fatalf("%d ranges: parsed %v, %v", MaxAckRanges, frames, err)
	}
	f.Ranges = append(f.Ranges, AckRange{0, 0})
	if err := f.Validate(); !errors.Is(err, ErrTooManyAckRanges) {
		t.Errorf("Validate with %d ranges: %v", len(f.Ranges), err)
	}
}

func TestAckValidate(t *testing.T) {
	tests := []struct {
		name   string
		ranges []AckRange
		want   error
	}{
		{"ok", []AckRange{{5, 10}, {0, 3}}, nil},
		{"empty", nil, ErrAckRange},
		{"inverted", []AckRange{{10, 5}}, ErrAckRange},
		{"adjacent", []AckRange{{5, 10}, {0, 4}}, ErrAckRange},
		{"overlapping", []AckRange{{5, 10}, {0, 7}}, ErrAckRange},
		{"ascending", []AckRange{{0, 3}, {5, 10}}, ErrAckRange},
		{"below one", []AckRange{{1, 10}, {0, 0}}, ErrAckRange},
		{"above 2^62-1", []AckRange{{0, MaxVarint + 1}}, ErrAckRange},
	}
	for _, tt := range tests {
		f := AckFrame{Ranges: tt.ranges}
		if err := f.Validate(); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("%s: Validate = %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == nil {
			continue
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Append did not panic", tt.name)
				}
			}()
			f.Append(nil)
		}()
	}
}

func TestAckAcks(t *testing.T) {
	f := AckFrame{Ranges: []AckRange{{90, 100}, {50, 70}, {0, 0}}}
	for pn := range uint64(110) {
		want := pn == 0 || pn >= 50 && pn <= 70 || pn >= 90 && pn <= 100
		if got := f.Acks(pn); got != want {
			t.Errorf("Acks(%d) = %v, want %v", pn, got, want)
		}
	}
	if f.Largest() != 100 || f.Ranges[1].Len() != 21 {
		t.Errorf("Largest %d, Len %d", f.Largest(), f.Ranges[1].Len())
	}
}

func TestMaxStreamDataLen(t *testing.T) {
	buf := make([]byte, 20001)
	for _, c := range []struct{ id, offset uint64 }{
		{0, 0}, {1, 0}, {64, 1}, {1 << 20, 1 << 14}, {MaxVarint, 1 << 40},
	} {
		for space := 0; space < 20000; space += 1 + space/64 {
			n := MaxStreamDataLen(space, c.id, c.offset)
			f := StreamFrame{StreamID: c.id, Offset: c.offset, Data: buf[:n], OmitLength: true}
			if n > 0 && f.EncodedLen() != space {
				t.Fatalf("id %d offset %d space %d: %d bytes encode to %d", c.id, c.offset, space, n, f.EncodedLen())
			}
			if n == 0 && f.EncodedLen()+1 <= space {
				t.Fatalf("id %d offset %d space %d: returned 0 but a byte fits", c.id, c.offset, space)
			}
			n = MaxStreamDataLenWithLength(space, c.id, c.offset)
			f = StreamFrame{StreamID: c.id, Offset: c.offset, Data: buf[:n]}
			g := StreamFrame{StreamID: c.id, Offset: c.offset, Data: buf[:n+1]}
			if n > 0 && f.EncodedLen() > space || g.EncodedLen() <= space {
				t.Fatalf("id %d offset %d space %d: with length, %d bytes encode to %d, one more to %d",
					c.id, c.offset, space, n, f.EncodedLen(), g.EncodedLen())
			}
		}
	}
	// The offset bound: no frame may reach past 2^62-1.
	if n := MaxStreamDataLen(1000, 1, MaxVarint-10); n != 10 {
		t.Errorf("near the offset limit: %d, want 10", n)
	}
	if n := MaxStreamDataLenWithLength(1000, 1, MaxVarint); n != 0 {
		t.Errorf("at the offset limit: %d, want 0", n)
	}
}

func TestMaxDatagramDataLen(t *testing.T) {
	buf := make([]byte, 20001)
	for space := range 20000 {
		n := MaxDatagramDataLen(space, false)
		if f := (DatagramFrame{Data: buf[:n], OmitLength: true}); n > 0 && f.EncodedLen() != space {
			t.Fatalf("space %d: %d bytes encode to %d", space, n, f.EncodedLen())
		}
		n = MaxDatagramDataLen(space, true)
		f := DatagramFrame{Data: buf[:n]}
		g := DatagramFrame{Data: buf[:n+1]}
		if n > 0 && f.EncodedLen() > space || g.EncodedLen() <= space {
			t.Fatalf("space %d with length: %d bytes encode to %d", space, n, f.EncodedLen())
		}
	}
}

func TestCloseReasonCut(t *testing.T) {
	f := CloseFrame{Code: CloseShutdown, Reason: bytes.Repeat([]byte("r"), 1000)}
	enc := f.Append(nil)
	if len(enc) != f.EncodedLen() {
		t.Fatalf("EncodedLen %d, wrote %d", f.EncodedLen(), len(enc))
	}
	frames, err := collect(enc)
	if err != nil || len(frames[0].f.(*CloseFrame).Reason) != MaxReasonLen {
		t.Fatalf("parsed %v, %v", frames, err)
	}
}

func TestStreamAppendPanicsPastOffsetLimit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	f := StreamFrame{StreamID: 1, Offset: MaxVarint, Data: []byte("x")}
	f.Append(nil)
}

func TestStreamOpenDropsZone(t *testing.T) {
	f := StreamOpenFrame{StreamID: 1, Proto: ProtoTCP, Src: mustAddrPort("[fe80::1%eth0]:22"), Dst: mustAddrPort("[fe80::2]:22")}
	frames, err := collect(f.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := frames[0].f.(*StreamOpenFrame).Src; got != mustAddrPort("[fe80::1]:22") {
		t.Errorf("Src = %v", got)
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{FrameStream.String(), "STREAM"},
		{FrameStreamOpen.String(), "STREAM_OPEN"},
		{FrameType(0x3f).String(), "FrameType(0x3f)"},
		{PacketData.String(), "DATA"},
		{PacketType(0x42).String(), "PacketType(0x42)"},
		{OpenNotAllowed.String(), "not allowed"},
		{OpenCode(99).String(), "OpenCode(99)"},
		{CloseFlowControl.String(), "flow control error"},
		{CloseCode(99).String(), "CloseCode(99)"},
		{ProtoTCP.String(), "tcp"},
		{Proto(1).String(), "Proto(1)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	// Every sample frame's type has a name and a documented ack-eliciting
	// property.
	for _, s := range sampleFrames() {
		ft := frameTypeOf(t, s.f)
		if strings.HasPrefix(ft.String(), "FrameType(") {
			t.Errorf("%s: unnamed type %v", s.name, ft)
		}
		want := ft != FramePadding && ft != FrameAck && ft != FrameClose
		if ft.AckEliciting() != want {
			t.Errorf("%v.AckEliciting() = %v", ft, !want)
		}
	}
}

func TestPaddingNegativeLen(t *testing.T) {
	f := PaddingFrame{Len: -5}
	if got := f.Append([]byte{1}); len(got) != 1 || f.EncodedLen() != 0 {
		t.Errorf("Append = %x, EncodedLen = %d", got, f.EncodedLen())
	}
}
