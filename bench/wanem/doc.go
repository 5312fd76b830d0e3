// Package wanem is wanopt's userspace WAN link emulator: the lab forwards
// packets between two TUN devices through it, adding the delay, jitter,
// loss, reordering, duplication and rate limit of the WAN under test.
//
// Pipe is the pure core of one direction: fed packets with their arrival
// time and asked which is due when, it owns no goroutine and never reads
// the clock, so its tests are deterministic. Link is the driver: it moves
// packets between two Devices through one Pipe per direction and sleeps on
// an absolute monotonic clock, keeping the emulator's error well below its
// target (RTT within ±0.5 ms + 1 %, rate within ±2 %). See Config.
package wanem
