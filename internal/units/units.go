// Package units parses the quantities operators type on command lines.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRate reads a rate in bits per second such as "250mbit", "1gbit",
// "800kbit" (or "250m", "1g", "800k") or a plain number of bits per second.
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1<<63 {
		return 0, fmt.Errorf("rate %q: want a number with kbit, mbit or gbit (e.g. 250mbit)", s)
	}
	return uint64(v * mult), nil
}
