package packet_test

import (
	"testing"

	. "github.com/wanopt/wanopt/dgram/packet"
)

// The seed corpus is in testdata/fuzz: valid UDP and echo packets of both
// families, and broken ones.

// FuzzParse: Parse never panics, and what it accepts is consistent.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		if p.Len > len(b) || len(p.L4) < L4HeaderLen || len(p.Payload) > len(p.L4) {
			t.Fatalf("inconsistent packet from % x: %+v", b, p)
		}
		if !p.IsUDP() && !p.IsEchoRequest() && !p.IsEchoReply() {
			t.Fatalf("accepted protocol %d type %d", p.Proto, p.Type)
		}
		if p.Src.Is4() != p.Dst.Is4() {
			t.Fatalf("mixed families %v %v", p.Src, p.Dst)
		}
	})
}
