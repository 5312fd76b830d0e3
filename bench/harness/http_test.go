package harness

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckCurlReport(t *testing.T) {
	files := []File{{Name: "f01-16k.bin", Size: 16384}, {Name: "f05-3072k.bin", Size: 3 << 20}}
	good := "200 16384 1 0.201 0.202 http://198.18.2.2:80/f01-16k.bin\n200 3145728 0 0.200 0.310 http://198.18.2.2:80/f05-3072k.bin\n"
	n, timings, err := checkCurlReport(good, files)
	if err != nil || n != 1 {
		t.Errorf("good report: %d connections, %v; want 1 and no error", n, err)
	}
	if want := []FileTiming{{Name: "f01-16k.bin", FirstS: 0.201, TotalS: 0.202}, {Name: "f05-3072k.bin", FirstS: 0.2, TotalS: 0.31}}; !slices.Equal(timings, want) {
		t.Errorf("good report: timings %+v, want %+v", timings, want)
	}
	if n, _, _ := checkCurlReport(strings.Replace(good, "200 3145728 0", "200 3145728 1", 1), files); n != 2 {
		t.Errorf("a second connection: counted %d connections, want 2", n)
	}
	for name, out := range map[string]string{
		"short file":     strings.Replace(good, "3145728", "3145727", 1),
		"not found":      strings.Replace(good, "200 16384", "404 16384", 1),
		"file missing":   strings.SplitAfter(good, "\n")[0],
		"file twice":     good + strings.SplitAfter(good, "\n")[0],
		"garbled line":   "200 16384\n",
		"garbled time":   strings.Replace(good, "0.310", "0,310", 1),
		"unasked file":   strings.Replace(good, "f01-16k", "f02-128k", 1),
		"nothing at all": "",
	} {
		if _, _, err := checkCurlReport(out, files); err == nil {
			t.Errorf("%s: no error for %q", name, out)
		}
	}
}
