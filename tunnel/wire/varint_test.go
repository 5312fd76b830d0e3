package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestVarintVectors(t *testing.T) {
	// RFC 9000 appendix A.1 sample varints, plus the boundaries of each length.
	tests := []struct {
		enc      []byte
		v        uint64
		shortest bool
	}{
		{[]byte{0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c}, 151288809941952652, true},
		{[]byte{0x9d, 0x7f, 0x3e, 0x7d}, 494878333, true},
		{[]byte{0x7b, 0xbd}, 15293, true},
		{[]byte{0x25}, 37, true},
		{[]byte{0x40, 0x25}, 37, false}, // non-shortest, still valid
		{[]byte{0x00}, 0, true},
		{[]byte{0x3f}, 63, true},
		{[]byte{0x40, 0x40}, 64, true},
		{[]byte{0x7f, 0xff}, 16383, true},
		{[]byte{0x80, 0x00, 0x40, 0x00}, 16384, true},
		{[]byte{0xbf, 0xff, 0xff, 0xff}, 1<<30 - 1, true},
		{[]byte{0xc0, 0, 0, 0, 0x40, 0, 0, 0}, 1 << 30, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, MaxVarint, true},
	}
	for _, tt := range tests {
		v, n, err := ParseVarint(tt.enc)
		if err != nil || v != tt.v || n != len(tt.enc) {
			t.Errorf("ParseVarint(%x) = %d, %d, %v; want %d, %d, nil", tt.enc, v, n, err, tt.v, len(tt.enc))
		}
		// Trailing bytes are not consumed.
		if v, n, err := ParseVarint(append(bytes.Clone(tt.enc), 0xff)); err != nil || v != tt.v || n != len(tt.enc) {
			t.Errorf("ParseVarint(%x ff) = %d, %d, %v", tt.enc, v, n, err)
		}
		if !tt.shortest {
			continue
		}
		if got := AppendVarint(nil, tt.v); !bytes.Equal(got, tt.enc) {
			t.Errorf("AppendVarint(%d) = %x, want %x", tt.v, got, tt.enc)
		}
		if got := VarintLen(tt.v); got != len(tt.enc) {
			t.Errorf("VarintLen(%d) = %d, want %d", tt.v, got, len(tt.enc))
		}
		for i := range len(tt.enc) {
			if _, n, err := ParseVarint(tt.enc[:i]); !errors.Is(err, ErrTruncated) || n != 0 {
				t.Errorf("ParseVarint(%x) = n %d, err %v; want ErrTruncated", tt.enc[:i], n, err)
			}
		}
	}
}

func TestVarintOverflowPanics(t *testing.T) {
	for _, f := range []func(){
		func() { AppendVarint(nil, MaxVarint+1) },
		func() { VarintLen(1 << 63) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic for a value above 2^62-1")
				}
			}()
			f()
		}()
	}
}
