// Package units parses the quantities operators type on command lines.
package units

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// RateSyntax says what ParseRate reads, for help texts and errors.
const RateSyntax = "bits per second with a unit: 50mbit, 50Mbps, 50M, 1gbit, 1Gbps, 800kbit"

// ParseRate reads a rate in bits per second: a number and a unit made of
// an SI prefix, k, M or G (any case: 'm' is mega, as milli-bits make no
// rate), and optionally bit, bits, bps, bit/s or b/s. So 50mbit, 50Mbit,
// 50Mbps, 50Mbit/s, 50M and 50m are all 50,000,000; 1500bit and 1500bps
// are 1,500. A number without a unit is refused (is 100 bits, kilobits or
// megabits?), except 0, which is 0 in any unit. Byte rates (50MB/s, 50MBps,
// 6MiB/s) are refused rather than multiplied by 8, so that nobody's rate
// is off by a factor the operator did not see.
//
// Errors say what is wrong without repeating s: callers name the setting
// and the value ("--wan-rate 100: needs a unit, e.g. 100mbit").
func ParseRate(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" || strings.Count(num, ".") > 1 || num == "." {
		if strings.HasPrefix(t, "-") {
			return 0, errors.New("a rate cannot be negative")
		}
		return 0, errors.New("not a rate: want a number and a unit, e.g. 50mbit, 50Mbps or 1gbit")
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, errors.New("not a rate: want a number and a unit, e.g. 50mbit, 50Mbps or 1gbit")
	}
	if unit == "" {
		if v == 0 {
			return 0, nil
		}
		return 0, errors.New("needs a unit, e.g. " + num + "mbit (bits per second: kbit, mbit, gbit; Mbps and M also work)")
	}
	mult, ok := rateUnit(unit)
	if !ok {
		if bm, ok := byteUnit(unit); ok {
			bits := strconv.FormatFloat(v*bm*8/1e6, 'f', -1, 64)
			return 0, errors.New(unit + " is bytes per second: give bits per second (" + num + unit + " is " + bits + "mbit)")
		}
		return 0, errors.New("unknown unit " + strconv.Quote(unit) + ": want kbit, mbit or gbit (also Mbps, M, bit/s)")
	}
	r := v * mult
	if r >= math.MaxUint64/2 {
		return 0, errors.New("too large a rate")
	}
	return uint64(math.Round(r)), nil
}

// rateUnit reads the unit of a rate: an optional prefix and an optional
// bit suffix, at least one of them.
func rateUnit(u string) (float64, bool) {
	mult := 1.0
	switch u[0] {
	case 'k', 'K':
		mult, u = 1e3, u[1:]
	case 'm', 'M':
		mult, u = 1e6, u[1:]
	case 'g', 'G':
		mult, u = 1e9, u[1:]
	default:
		if !strings.HasPrefix(strings.ToLower(u), "b") {
			return 0, false
		}
	}
	if u == "" {
		return mult, true
	}
	// A capital B alone is a byte (MB/s, MBps); "Bit" spelt out is a bit.
	if u[0] == 'B' && !strings.HasPrefix(strings.ToLower(u), "bit") {
		return 0, false
	}
	switch strings.ToLower(u) {
	case "b", "bit", "bits", "bps", "bit/s", "bits/s", "b/s":
		return mult, true
	}
	return 0, false
}

// byteUnit reads a unit of bytes per second (MB/s, MBps, MiB/s, kB/s,
// B/s) and returns its multiplier in bytes.
func byteUnit(u string) (float64, bool) {
	mult := 1.0
	l := strings.ToLower(u)
	for _, p := range []struct {
		prefix string
		mult   float64
	}{{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}} {
		if strings.HasPrefix(l, p.prefix) {
			mult, u, l = p.mult, u[len(p.prefix):], l[len(p.prefix):]
			break
		}
	}
	switch {
	case strings.HasPrefix(l, "byte"):
		return mult, true
	case u == "B", u == "B/s", u == "Bps", u == "BPS":
		return mult, true
	}
	return 0, false
}
