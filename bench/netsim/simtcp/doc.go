// Package simtcp is a simulated bulk TCP for netsim: a Sender and a Receiver
// that implement netsim.Endpoint, for baselines ("what would plain TCP do on
// this path") and for cross traffic.
//
// It is faithful where throughput on long, lossy paths is decided, and
// simple elsewhere:
//
//   - Data moves one way, in segments of MSS payload bytes that occupy
//     MSS+HeaderBytes on the wire (1448+52 = 1500 by default: IPv4, TCP and
//     the timestamp option). There is no handshake: the sender starts at
//     once with the initial window of its controller, and the last segment
//     carries FIN.
//   - The receiver acknowledges cumulatively with up to three SACK blocks
//     (the block holding the latest segment first, as RFC 2018 asks),
//     echoes timestamps (RFC 7323) and advertises a fixed window equal to its
//     buffer, as a receiver whose application reads at once would.
//     Delayed ACKs (every second segment, or after a timeout) are optional.
//   - The sender keeps a SACK scoreboard (RFC 6675 style: a segment is lost
//     when three segments above it were SACKed, "pipe" counts segments in
//     flight), retransmits lost segments before new data, detects lost
//     retransmissions as Linux did before RACK, calls the controller's
//     OnLoss once per recovery episode and paces recovery with proportional
//     rate reduction (RFC 6937). Its RFC 6298 retransmission timer has
//     Linux's 200 ms minimum. In flight it keeps min(cwnd, receive window,
//     send buffer).
//   - The congestion window comes from a WindowController: NewReno, or
//     CUBIC (RFC 9438) with HyStart++ (RFC 9406) as Linux's default, or any
//     other implementation.
//
// Not modelled: pacing, RACK/TLP, undo of spurious retransmissions, window
// scaling limits, Nagle, silly-window avoidance, the handshake.
package simtcp
