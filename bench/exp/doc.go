// Package exp holds the experiments behind 'wanbench', each named for what
// it measures: the emulator's self-check (Check), the published test with
// plain TCP (Baseline) and against wanopt over an RTT sweep (RTTSweep, and
// BinaryAB comparing two builds at one point), many files over keep-alive
// HTTP (FileMix), a SACK-forging middlebox (Middlebox), how a hub shares a
// link (HubShares), and the transport in the deterministic simulator
// (SimTCP, SimTunnel, Bars). Each builds its lab through bench/harness,
// measures, and returns a result that renders itself through bench/report.
package exp
