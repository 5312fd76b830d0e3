//go:build race

package bridge

const raceEnabled = true
