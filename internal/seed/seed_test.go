package seed

import "testing"

func TestSameSeedSameStream(t *testing.T) {
	a, b, c := Rand(7), Rand(7), Rand(8)
	same := true
	for range 16 {
		x, y, z := a.Uint64(), b.Uint64(), c.Uint64()
		if x != y {
			t.Fatalf("seed 7 gave %d and %d", x, y)
		}
		same = same && x == z
	}
	if same {
		t.Fatal("seeds 7 and 8 gave the same stream")
	}
}

func TestChance(t *testing.T) {
	r := Rand(1)
	for range 1000 {
		if Chance(r, 0) {
			t.Fatal("Chance(0) was true")
		}
		if !Chance(r, 100) {
			t.Fatal("Chance(100) was false")
		}
	}
	n := 0
	for range 10000 {
		if Chance(r, 25) {
			n++
		}
	}
	if n < 2200 || n > 2800 {
		t.Fatalf("Chance(25) true %d times in 10000", n)
	}
}
