//go:build !race

package ingress

const raceEnabled = false
