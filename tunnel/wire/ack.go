package wire

import "fmt"

// MaxAckRanges is the most ranges an ACK frame may carry. A parser rejects
// frames with more (ErrTooManyAckRanges) so that decoding needs no
// allocation; a sender with more gaps reports the newest MaxAckRanges.
const MaxAckRanges = 64

// AckRange is a closed interval of acknowledged packet numbers,
// Smallest <= Largest.
type AckRange struct {
	Smallest, Largest uint64
}

// Len returns the number of packet numbers in r.
func (r AckRange) Len() uint64 { return r.Largest - r.Smallest + 1 }

// AckFrame is an ACK frame: the packet numbers received, as ranges.
//
// On the wire (RFC 9000 §19.3 layout): type 0x02 (0x03 with ECN counts),
// Largest Acknowledged, ACK Delay, ACK Range Count (len(Ranges)-1), First ACK
// Range (Ranges[0].Len()-1), then for each further range a Gap (number of
// missing packets between it and the previous range, minus one) and an ACK
// Range Length (its Len()-1), then optionally the three ECN counts. All fields
// are varints.
type AckFrame struct {
	// Ranges in descending order: Ranges[0].Largest is the largest packet
	// number acknowledged, and each range lies below the previous one with at
	// least one missing packet number between them. 1 to MaxAckRanges
	// entries. A parsed AckFrame's Ranges alias the Parser's storage and are
	// valid until the next call to Next or Reset.
	Ranges []AckRange
	// AckDelay is the time in microseconds between receiving the largest
	// acknowledged packet and sending this frame.
	AckDelay uint64
	// ECN reports whether the ECN counts are present (frame type 0x03).
	ECN bool
	// ECT0, ECT1 and CE are the counts of packets received with the
	// respective ECN codepoint (only when ECN is set).
	ECT0, ECT1, CE uint64
}

// Largest returns the largest acknowledged packet number, or 0 if there are
// no ranges.
func (f *AckFrame) Largest() uint64 {
	if len(f.Ranges) == 0 {
		return 0
	}
	return f.Ranges[0].Largest
}

// Acks reports whether packet number pn is acknowledged by f.
func (f *AckFrame) Acks(pn uint64) bool {
	for _, r := range f.Ranges {
		if pn > r.Largest {
			return false
		}
		if pn >= r.Smallest {
			return true
		}
	}
	return false
}

// Validate reports whether f can be encoded: 1 to MaxAckRanges ranges, each
// with Smallest <= Largest <= MaxVarint, in descending order with at least
// one packet number missing between neighbours, and varint-sized delay and
// ECN counts. Errors wrap ErrAckRange or ErrTooManyAckRanges. Frames returned
// by a Parser always validate.
func (f *AckFrame) Validate() error {
	if len(f.Ranges) == 0 {
		return fmt.Errorf("wire: ACK frame without ranges: %w", ErrAckRange)
	}
	if len(f.Ranges) > MaxAckRanges {
		return fmt.Errorf("wire: ACK frame with %d ranges, at most %d: %w",
			len(f.Ranges), MaxAckRanges, ErrTooManyAckRanges)
	}
	if f.Ranges[0].Largest > MaxVarint || f.AckDelay > MaxVarint ||
		f.ECN && (f.ECT0 > MaxVarint || f.ECT1 > MaxVarint || f.CE > MaxVarint) {
		return fmt.Errorf("wire: ACK frame field exceeds 2^62-1: %w", ErrAckRange)
	}
	for i, r := range f.Ranges {
		if r.Smallest > r.Largest {
			return fmt.Errorf("wire: ACK range %d [%d, %d] is empty: %w", i, r.Smallest, r.Largest, ErrAckRange)
		}
		if i > 0 && (f.Ranges[i-1].Smallest < 2 || r.Largest > f.Ranges[i-1].Smallest-2) {
			return fmt.Errorf("wire: ACK range %d [%d, %d] not below range %d [%d, %d] with a gap: %w",
				i, r.Smallest, r.Largest, i-1, f.Ranges[i-1].Smallest, f.Ranges[i-1].Largest, ErrAckRange)
		}
	}
	return nil
}

// EncodedLen returns the encoded length of f. f must be valid (see
// Validate).
func (f *AckFrame) EncodedLen() int {
	if len(f.Ranges) == 0 {
		return 0
	}
	r0 := f.Ranges[0]
	n := 1 + VarintLen(r0.Largest) + VarintLen(f.AckDelay) +
		VarintLen(uint64(len(f.Ranges)-1)) + VarintLen(r0.Largest-r0.Smallest)
	for i := 1; i < len(f.Ranges); i++ {
		r := f.Ranges[i]
		n += VarintLen(f.Ranges[i-1].Smallest-r.Largest-2) + VarintLen(r.Largest-r.Smallest)
	}
	if f.ECN {
		n += VarintLen(f.ECT0) + VarintLen(f.ECT1) + VarintLen(f.CE)
	}
	return n
}

// Append appends f to b. It panics if f is invalid (see Validate): the
// ranges come from the caller's own bookkeeping, so that is a bug, not a
// network condition. Append does not retain f.Ranges.
func (f *AckFrame) Append(b []byte) []byte {
	if err := f.Validate(); err != nil {
		panic(err.Error())
	}
	t := byte(FrameAck)
	if f.ECN {
		t |= ackECNBit
	}
	r0 := f.Ranges[0]
	b = append(b, t)
	b = AppendVarint(b, r0.Largest)
	b = AppendVarint(b, f.AckDelay)
	b = AppendVarint(b, uint64(len(f.Ranges)-1))
	b = AppendVarint(b, r0.Largest-r0.Smallest)
	for i := 1; i < len(f.Ranges); i++ {
		r := f.Ranges[i]
		b = AppendVarint(b, f.Ranges[i-1].Smallest-r.Largest-2)
		b = AppendVarint(b, r.Largest-r.Smallest)
	}
	if f.ECN {
		b = AppendVarint(b, f.ECT0)
		b = AppendVarint(b, f.ECT1)
		b = AppendVarint(b, f.CE)
	}
	return b
}

// parseAck decodes the ACK frame body in r (type byte t already consumed)
// into f, storing the ranges in ranges. It returns an error wrapping
// ErrTruncated, ErrTooManyAckRanges or ErrAckRange.
func parseAck(r *reader, t byte, f *AckFrame, ranges *[MaxAckRanges]AckRange) error {
	largest := r.varint()
	f.AckDelay = r.varint()
	count := r.varint()
	first := r.varint()
	if r.short {
		return ErrTruncated
	}
	if count >= MaxAckRanges {
		return fmt.Errorf("%d ranges, at most %d: %w", count+1, MaxAckRanges, ErrTooManyAckRanges)
	}
	if first > largest {
		return fmt.Errorf("first range of %d below largest %d: %w", first+1, largest, ErrAckRange)
	}
	ranges[0] = AckRange{Smallest: largest - first, Largest: largest}
	for i := 1; i <= int(count); i++ {
		gap := r.varint()
		length := r.varint()
		if r.short {
			return ErrTruncated
		}
		prev := ranges[i-1].Smallest
		if prev < gap+2 {
			return fmt.Errorf("range %d: gap %d below smallest %d: %w", i, gap, prev, ErrAckRange)
		}
		hi := prev - gap - 2
		if length > hi {
			return fmt.Errorf("range %d: length %d below largest %d: %w", i, length+1, hi, ErrAckRange)
		}
		ranges[i] = AckRange{Smallest: hi - length, Largest: hi}
	}
	f.Ranges = ranges[:count+1]
	f.ECN = t&ackECNBit != 0
	f.ECT0, f.ECT1, f.CE = 0, 0, 0
	if f.ECN {
		f.ECT0 = r.varint()
		f.ECT1 = r.varint()
		f.CE = r.varint()
		if r.short {
			return ErrTruncated
		}
	}
	return nil
}
