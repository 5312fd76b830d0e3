//go:build !race

package dgram

const raceEnabled = false
