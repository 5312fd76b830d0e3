// Package netsim is a deterministic discrete-event network simulator for
// testing wanopt's sans-IO transport and congestion controllers.
//
// A Sim owns a virtual clock (monotime.Time, from a fixed non-zero epoch),
// an event heap ordered by (time, sequence number), so events at the same
// instant run in scheduling order, and one random stream per link derived
// from the seed. Nothing reads the wall clock, sleeps or starts goroutines:
// the same seed and inputs give the same events, counters and times.
//
// # Topology
//
// Links carry datagrams one way: a drop-tail queue in front of a serialiser
// of RateBps, then delay, jitter, reordering, duplication, losses and
// outages (see LinkConfig). A flow is a pair of Endpoints joined by a
// forward and a reverse link; flows sharing two links make a dumbbell.
//
// # Driving endpoints
//
// After every event delivered to an endpoint (the flow's start, a datagram,
// a timeout, Wake) the simulator calls PollTransmit until it returns 0,
// routes each datagram, and reads NextTimeout. Each endpoint has at most one
// timer event in the heap, moved in place when NextTimeout changes.
//
// A Sim is not safe for concurrent use. Endpoints and callbacks run on the
// goroutine that called RunFor or RunUntil and may call the Sim's methods
// (At, AddFlow, Wake, Link.SetConfig, the stats getters) from there.
package netsim
