// Package simtcp is a simulated bulk TCP for netsim: a Sender and a Receiver
// that implement netsim.Endpoint, for baselines ("what would plain TCP do on
// this path") and for cross traffic.
//
// It is faithful where throughput on long, lossy paths is decided:
//
//   - Data moves one way, in segments of MSS payload bytes that occupy
//     MSS+HeaderBytes on the wire (1448+52 = 1500 by default). There is no
//     handshake; the last segment carries FIN.
//   - The receiver acknowledges cumulatively with up to three SACK blocks
//     (the block holding the latest segment first, as RFC 2018 asks),
//     echoes timestamps (RFC 7323) and advertises a fixed window equal to
//     its buffer. Delayed ACKs are optional.
//   - The sender keeps an RFC 6675 SACK scoreboard (lost when three segments
//     above were SACKed), retransmits lost segments before new data, detects
//     lost retransmissions as Linux did before RACK, calls OnLoss once per
//     recovery episode and paces recovery with PRR (RFC 6937). Its RFC 6298
//     timer has Linux's 200 ms minimum. In flight it keeps min(cwnd, receive
//     window, send buffer).
//   - The congestion window comes from a WindowController: NewReno, CUBIC
//     (RFC 9438) with HyStart++ (RFC 9406) as Linux's default, or another.
//
// Not modelled: pacing, RACK/TLP, undo of spurious retransmissions, window
// scaling limits, Nagle, silly-window avoidance, the handshake.
package simtcp
