package wire

import (
	"bytes"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// encoder is what every frame type implements; tests use it to handle
// frames generically (the package itself avoids the interface on the hot
// path).
type encoder interface {
	Append(b []byte) []byte
	EncodedLen() int
}

// sampleFrames returns named frames covering every frame type and every type
// byte variant (ACK with and without ECN, all eight STREAM flag
// combinations, both DATAGRAM forms), with field values spanning each varint
// length. Frames that run to the end of the packet come last in their group
// and are marked.
func sampleFrames() []struct {
	name  string
	f     encoder
	toEnd bool
} {
	data := bytes.Repeat([]byte("wanopt"), 20)
	return []struct {
		name  string
		f     encoder
		toEnd bool
	}{
		{"padding", &PaddingFrame{Len: 3}, false},
		{"ping", &PingFrame{}, false},
		{"ack one range", &AckFrame{Ranges: []AckRange{{Smallest: 0, Largest: 0}}}, false},
		{"ack ranges", &AckFrame{Ranges: []AckRange{{90, 100}, {50, 70}, {10, 48}, {0, 0}}, AckDelay: 25000}, false},
		{"ack ecn", &AckFrame{Ranges: []AckRange{{1 << 40, 1<<40 + 5}}, AckDelay: 1, ECN: true, ECT0: 7, ECT1: 0, CE: 1 << 20}, false},
		{"ack max", &AckFrame{Ranges: []AckRange{{MaxVarint, MaxVarint}, {0, MaxVarint - 2}}, AckDelay: MaxVarint}, false},
		{"reset stream", &ResetStreamFrame{StreamID: 4, Code: 0x1234, FinalSize: 1 << 33}, false},
		{"stop sending", &StopSendingFrame{StreamID: 1 << 20, Code: 3}, false},
		{"stream len", &StreamFrame{StreamID: 1, Data: data[:10]}, false},
		{"stream len fin", &StreamFrame{StreamID: 1, Data: data[:10], Fin: true}, false},
		{"stream off len", &StreamFrame{StreamID: 9, Offset: 70000, Data: data}, false},
		{"stream off len fin", &StreamFrame{StreamID: 9, Offset: 1 << 40, Data: data[:1], Fin: true}, false},
		{"stream fin only", &StreamFrame{StreamID: 9, Offset: 12345, Fin: true}, false},
		{"stream max offset", &StreamFrame{StreamID: MaxVarint, Offset: MaxVarint - 3, Data: data[:3]}, false},
		{"max data", &MaxDataFrame{Max: 1 << 50}, false},
		{"max stream data", &MaxStreamDataFrame{StreamID: 17, Max: 16384}, false},
		{"data blocked", &DataBlockedFrame{Limit: 63}, false},
		{"stream data blocked", &StreamDataBlockedFrame{StreamID: 64, Limit: 1 << 30}, false},
		{"close", &CloseFrame{Code: CloseProtocolViolation, Reason: []byte("bad frame")}, false},
		{"close empty", &CloseFrame{Code: CloseNoError}, false},
		{"close max reason", &CloseFrame{Code: 99, Reason: bytes.Repeat([]byte{'x'}, MaxReasonLen)}, false},
		{"stream open v4", &StreamOpenFrame{StreamID: 5, Proto: ProtoTCP,
			Src: netip.MustParseAddrPort("198.18.0.10:40000"), Dst: netip.MustParseAddrPort("198.19.0.1:443")}, false},
		{"stream open v6", &StreamOpenFrame{StreamID: 1 << 30, Proto: ProtoUDP,
			Src: netip.MustParseAddrPort("[2001:db8::1]:5353"), Dst: netip.MustParseAddrPort("[::ffff:198.18.0.1]:53")}, false},
		{"stream open no src", &StreamOpenFrame{StreamID: 3, Proto: 132,
			Src: netip.AddrPortFrom(netip.Addr{}, 0), Dst: netip.MustParseAddrPort("198.19.0.1:9")}, false},
		{"open result ok", &OpenResultFrame{StreamID: 5, Code: OpenOK}, false},
		{"open result unknown code", &OpenResultFrame{StreamID: 5, Code: 1000}, false},
		{"datagram len", &DatagramFrame{Data: data[:40]}, false},
		{"datagram empty", &DatagramFrame{}, false},
		{"stream to end", &StreamFrame{StreamID: 2, Data: data, OmitLength: true}, true},
		{"stream off to end fin", &StreamFrame{StreamID: 2, Offset: 99, Data: data[:5], Fin: true, OmitLength: true}, true},
		{"stream to end empty fin", &StreamFrame{StreamID: 2, Fin: true, OmitLength: true}, true},
		{"stream off to end", &StreamFrame{StreamID: 2, Offset: 1, Data: data[:7], OmitLength: true}, true},
		{"datagram to end", &DatagramFrame{Data: data[:33], OmitLength: true}, true},
	}
}

// parsed is one frame as collected from a Parser, deep-copied so that it
// outlives the Parser and the payload.
type parsed struct {
	typ FrameType
	f   encoder
}

// collect parses payload to its end and returns the frames and the error.
func collect(payload []byte) ([]parsed, error) {
	var p Parser
	p.Reset(payload)
	var out []parsed
	for p.Next() {
		out = append(out, parsed{p.Type(), current(&p)})
	}
	return out, p.Err()
}

// current returns a deep copy of p's current frame.
func current(p *Parser) encoder {
	switch p.Type() {
	case FramePadding:
		f := p.Padding()
		return &f
	case FramePing:
		return &PingFrame{}
	case FrameAck:
		f := p.Ack()
		f.Ranges = slices.Clone(f.Ranges)
		return &f
	case FrameResetStream:
		f := p.ResetStream()
		return &f
	case FrameStopSending:
		f := p.StopSending()
		return &f
	case FrameStream:
		f := p.Stream()
		f.Data = bytes.Clone(f.Data)
		return &f
	case FrameMaxData:
		f := p.MaxData()
		return &f
	case FrameMaxStreamData:
		f := p.MaxStreamData()
		return &f
	case FrameDataBlocked:
		f := p.DataBlocked()
		return &f
	case FrameStreamDataBlocked:
		f := p.StreamDataBlocked()
		return &f
	case FrameClose:
		f := p.Close()
		f.Reason = bytes.Clone(f.Reason)
		return &f
	case FrameStreamOpen:
		f := p.StreamOpen()
		return &f
	case FrameOpenResult:
		f := p.OpenResult()
		return &f
	case FrameDatagram:
		f := p.Datagram()
		f.Data = bytes.Clone(f.Data)
		return &f
	}
	panic("unknown frame type " + p.Type().String())
}

// frameEqual compares two frames, treating nil and empty byte slices alike.
func frameEqual(a, b encoder) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

func normalize(f encoder) encoder {
	switch f := f.(type) {
	case *StreamFrame:
		g := *f
		if len(g.Data) == 0 {
			g.Data = nil
		}
		return &g
	case *DatagramFrame:
		g := *f
		if len(g.Data) == 0 {
			g.Data = nil
		}
		return &g
	case *CloseFrame:
		g := *f
		if len(g.Reason) == 0 {
			g.Reason = nil
		}
		return &g
	}
	return f
}

// frameTypeOf returns the FrameType an encoder produces.
func frameTypeOf(t *testing.T, f encoder) FrameType {
	t.Helper()
	var p Parser
	p.Reset(f.Append(nil))
	if !p.Next() {
		t.Fatalf("%T does not parse: %v", f, p.Err())
	}
	return p.Type()
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
