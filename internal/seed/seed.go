// Package seed makes the deterministic randomness the simulator, the link
// emulator and the tests draw from: the same seed gives the same stream on
// every machine, so a failing run can be replayed from the seed it logged.
package seed

import (
	"encoding/binary"
	"math/rand/v2"
)

// ChaCha8 returns a ChaCha8 source keyed by seed (its little-endian bytes,
// the rest of the key zero).
func ChaCha8(seed uint64) *rand.ChaCha8 {
	var k [32]byte
	binary.LittleEndian.PutUint64(k[:], seed)
	return rand.NewChaCha8(k)
}

// Rand returns a generator over ChaCha8(seed).
func Rand(seed uint64) *rand.Rand { return rand.New(ChaCha8(seed)) }

// Chance reports true with probability pct/100.
func Chance(r *rand.Rand, pct float64) bool {
	return pct > 0 && r.Float64()*100 < pct
}
