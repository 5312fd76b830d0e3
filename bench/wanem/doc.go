// Package wanem is wanopt's userspace WAN link emulator: the kernel here has
// no netem, so the lab forwards packets between two TUN devices through this
// package, adding the delay, jitter, loss, reordering, duplication and rate
// limit of the WAN under test.
//
// The package has two layers. Pipe is the pure core of one direction: it is
// fed packets with the time they arrived and is asked which packet is due
// when; it owns no goroutine and never reads the clock, so its tests run on
// a fake clock and give the same result every run. Link is the driver: it
// reads packets from two Devices, puts each through the Pipe of its
// direction, and writes it to the other Device at its release time, sleeping
// with an absolute monotonic clock (clock_nanosleep on Linux) so that the
// emulator's own timing error stays far below the project's precision
// target (RTT within ±0.5 ms + 1 %, rate within ±2 %).
//
// One direction, in order: the outage (Link.SetDown takes the link down
// and up at run time), the MTU (Link.SetMTU changes it at run time;
// larger packets vanish silently), random loss, Gilbert–Elliott burst
// loss, the drop-tail queue in front of the rate limiter, the rate limiter itself
// (the bottleneck), propagation delay plus jitter, and finally reordering
// and duplication. See Config for the exact semantics of each step.
package wanem
