// Package netsim is a deterministic discrete-event network simulator for
// testing wanopt's sans-IO transport and congestion controllers.
//
// A Sim owns a virtual clock (monotime.Time, starting at a fixed epoch that
// is not zero), an event heap ordered by (time, sequence number) so that
// events at the same instant run in the order they were scheduled, and one
// random number stream per link derived from the seed. Nothing reads the
// wall clock, sleeps or starts goroutines, so a run with the same seed and
// the same inputs produces the same events, counters and delivery times.
//
// # Topology
//
// Links carry datagrams one way: a drop-tail queue in bytes in front of a
// serialiser of RateBps bits per second, then propagation delay, jitter,
// reordering, duplication, random and Gilbert–Elliott burst loss and
// scheduled outages. A flow is a pair of Endpoints (left and right) joined by
// a forward link (left to right) and a reverse link (right to left); many
// flows may share the same two links, which gives the classic dumbbell with
// one bottleneck each way. A flow may add extra one-way delay of its own.
//
// # Driving endpoints
//
// After every event delivered to an endpoint (AddFlow's start, a datagram, a
// timeout, Wake) the simulator calls PollTransmit until it returns 0, routes
// each datagram to the flow's link for that direction, and then reads
// NextTimeout. Each endpoint has at most one timer event in the heap; it is
// moved in place when NextTimeout changes.
//
// A Sim is not safe for concurrent use. Endpoints and callbacks run on the
// goroutine that called RunFor or RunUntil and may call the Sim's methods
// (At, AddFlow, Wake, Link.SetConfig, the stats getters) from there.
package netsim
