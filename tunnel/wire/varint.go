package wire

import "fmt"

// MaxVarint is the largest value a varint can hold: 2^62-1. It also bounds
// packet numbers, stream IDs, stream offsets and flow-control limits.
const MaxVarint = 1<<62 - 1

// VarintLen returns the number of bytes AppendVarint uses for v: 1, 2, 4 or
// 8. It panics if v exceeds MaxVarint.
func VarintLen(v uint64) int {
	switch {
	case v < 1<<6:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<30:
		return 4
	case v <= MaxVarint:
		return 8
	}
	panic(fmt.Sprintf("wire: varint %d exceeds 2^62-1", v))
}

// AppendVarint appends v in the shortest RFC 9000 §16 variable-length
// encoding: the two high bits of the first byte give the length (1, 2, 4 or 8
// bytes), the rest is the value in network byte order. It panics if v exceeds
// MaxVarint: values decoded from the network never do, so that is a bug in
// the caller.
func AppendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, 0x40|byte(v>>8), byte(v))
	case v < 1<<30:
		return append(b, 0x80|byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	case v <= MaxVarint:
		return append(b, 0xc0|byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	panic(fmt.Sprintf("wire: varint %d exceeds 2^62-1", v))
}

// ParseVarint decodes the varint at the start of b and returns it with the
// number of bytes it used. Non-shortest encodings are accepted (RFC 9000
// allows them). It returns n == 0 and an error wrapping ErrTruncated if b ends
// inside the varint.
func ParseVarint(b []byte) (v uint64, n int, err error) {
	v, n = parseVarint(b)
	if n == 0 {
		return 0, 0, fmt.Errorf("wire: varint: %w", ErrTruncated)
	}
	return v, n, nil
}

// parseVarint is ParseVarint without the error value; n == 0 means truncated.
func parseVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	switch b[0] >> 6 {
	case 0:
		return uint64(b[0]), 1
	case 1:
		if len(b) < 2 {
			return 0, 0
		}
		return uint64(b[0]&0x3f)<<8 | uint64(b[1]), 2
	case 2:
		if len(b) < 4 {
			return 0, 0
		}
		return uint64(b[0]&0x3f)<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3]), 4
	default:
		if len(b) < 8 {
			return 0, 0
		}
		return uint64(b[0]&0x3f)<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]), 8
	}
}
