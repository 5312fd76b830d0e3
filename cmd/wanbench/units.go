package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wanopt/wanopt/internal/units"
)

// parseRate reads a link rate such as "250mbit" (see units.ParseRate).
var parseRate = units.ParseRate

// parseBytes reads a size such as "100MB", "25MB", "64KB", "1GB" the way
// iperf 2 does (binary multiples: 100MB is 100 MiB) or a plain byte count.
func parseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with KB, MB or GB (e.g. 100MB)", s)
	}
	return int64(v * float64(mult)), nil
}

// parsePercent reads "1%", "0.5%" or "1" as a percentage.
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("percentage %q: want 0 to 100, e.g. 1%%", s)
	}
	return v, nil
}

// parseQueue reads a drop-tail queue limit given in bytes ("2MB") or as
// time at the link rate ("50ms"); exactly one of the results is set.
func parseQueue(s string) (bytes int, delay time.Duration, err error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return 0, d, nil
	}
	if n, err := parseBytes(s); err == nil {
		return int(n), 0, nil
	}
	return 0, 0, fmt.Errorf("queue %q: want bytes (2MB) or a positive duration at the link rate (50ms)", s)
}
