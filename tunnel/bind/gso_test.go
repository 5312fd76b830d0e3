package bind

import "testing"

func TestGSORun(t *testing.T) {
	mk := func(sizes ...int) [][]byte {
		bufs := make([][]byte, len(sizes))
		for i, s := range sizes {
			bufs[i] = make([]byte, s)
		}
		return bufs
	}
	for _, tc := range []struct {
		name     string
		sizes    []int
		maxSegs  int
		maxBytes int
		want     int
	}{
		{"none", nil, 64, maxGSOBytes, 0},
		{"one", []int{100}, 64, maxGSOBytes, 1},
		{"equal", []int{100, 100, 100}, 64, maxGSOBytes, 3},
		{"shorter tail ends the run", []int{100, 100, 50, 50}, 64, maxGSOBytes, 3},
		{"longer breaks the run", []int{100, 100, 200, 200}, 64, maxGSOBytes, 2},
		{"empty first", []int{0, 0, 0}, 64, maxGSOBytes, 1},
		{"empty breaks the run", []int{100, 0, 100}, 64, maxGSOBytes, 1},
		{"segment limit", []int{10, 10, 10, 10, 10}, 4, maxGSOBytes, 4},
		{"byte limit", []int{100, 100, 100, 100}, 64, 350, 3},
		{"byte limit counts the tail", []int{100, 100, 60}, 64, 250, 2},
		{"oversized alone", []int{400, 400}, 64, 350, 1},
		{"full-size datagrams", repeat(1472, 64), maxGSOSegments, maxGSOBytes, 44},
	} {
		if got := gsoRun(mk(tc.sizes...), tc.maxSegs, tc.maxBytes); got != tc.want {
			t.Errorf("%s: gsoRun(%v, %d, %d) = %d, want %d", tc.name, tc.sizes, tc.maxSegs, tc.maxBytes, got, tc.want)
		}
	}
}

func repeat(size, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = size
	}
	return s
}
