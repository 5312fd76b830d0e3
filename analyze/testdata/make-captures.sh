#!/usr/bin/env bash
# make-captures.sh — record the lab captures analyze's tests use.
#
# Run as root from the repository root:
#
#	bash analyze/testdata/make-captures.sh [SCENARIO...]
#
# (no arguments: all scenarios; e.g. lab-zero-window to redo one).
#
# Two network namespaces (woan<pid>-c, woan<pid>-s), each with a TUN device
# wan0 (198.18.0.1/24 and 198.18.0.2/24), joined by the project's userspace
# link emulator (wanbench link: delay, rate with a drop-tail queue, loss —
# this kernel has no netem). tcpdump records on the client's (the sender's)
# TUN device: link type RAW, headers only (-s 128). Each scenario pairs a
# link setting with labtcp (testdata/labtcp), a tiny sender/receiver whose
# socket buffer and pacing are set by flags. Everything created is removed
# on exit, also on failure or interrupt; only processes this script started
# are stopped, by their PID.
set -euo pipefail

OUT=${OUT:-analyze/testdata}
SELECTED=" $* "
P=$$
NSC=woan$P-c
NSS=woan$P-s
BIN=$(mktemp -d /tmp/woan$P-bin.XXXX)
PIDS=()

cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	ip netns del "$NSC" 2>/dev/null || true
	ip netns del "$NSS" 2>/dev/null || true
	rm -rf "$BIN"
}
trap cleanup EXIT INT TERM

go build -o "$BIN/wanbench" ./cmd/wanbench
go build -o "$BIN/labtcp" ./analyze/testdata/labtcp

for ns in "$NSC" "$NSS"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	ip -n "$ns" tuntap add dev wan0 mode tun
	ip -n "$ns" link set wan0 mtu 1500 txqueuelen 10000 up
done
ip -n "$NSC" addr add 198.18.0.1/24 dev wan0
ip -n "$NSS" addr add 198.18.0.2/24 dev wan0

# scenario NAME "LINK FLAGS" "SERVER FLAGS" "SENDER FLAGS"
scenario() {
	local name=$1 linkflags=$2 srvflags=$3 sndflags=$4 rx=${5:-}
	if [[ "$SELECTED" != "  " && "$SELECTED" != *" $name "* ]]; then return; fi
	echo "== $name: link $linkflags; server $srvflags; sender $sndflags"
	# shellcheck disable=SC2086
	"$BIN/wanbench" link --a "$NSC:wan0" --b "$NSS:wan0" $linkflags >"$BIN/link.out" 2>&1 &
	local link=$!
	PIDS+=("$link")
	for _ in $(seq 50); do grep -q "wanem ready" "$BIN/link.out" && break; sleep 0.1; done
	ip netns exec "$NSC" tcpdump -Z root -i wan0 -s 128 -U -w "$OUT/$name.pcap" tcp port 5001 2>"$BIN/tcpdump.err" &
	local dump=$!
	PIDS+=("$dump")
	local rxdump=""
	if [[ -n "$rx" ]]; then # also capture at the receiver
		ip netns exec "$NSS" tcpdump -Z root -i wan0 -s 128 -U -w "$OUT/$name-rx.pcap" tcp port 5001 2>"$BIN/tcpdump-rx.err" &
		rxdump=$!
		PIDS+=("$rxdump")
	fi
	sleep 1
	: >"$BIN/srv.out"
	# shellcheck disable=SC2086
	ip netns exec "$NSS" "$BIN/labtcp" serve -addr 198.18.0.2:5001 $srvflags >"$BIN/srv.out" &
	local srv=$!
	PIDS+=("$srv")
	for _ in $(seq 50); do grep -q listening "$BIN/srv.out" && break; sleep 0.1; done
	# shellcheck disable=SC2086
	ip netns exec "$NSC" "$BIN/labtcp" send -addr 198.18.0.2:5001 $sndflags
	wait "$srv" || true
	sleep 0.5
	kill -INT "$dump"; wait "$dump" || true
	if [[ -n "$rxdump" ]]; then kill -INT "$rxdump"; wait "$rxdump" || true; fi
	kill -INT "$link"; wait "$link" || true
	PIDS=()
	cat "$BIN/srv.out"
}

# 16 kB receive buffer, 40 ms RTT: at most ~3.3 Mbit/s.
# Also captured at the receiver (lab-window-limited-rx.pcap).
scenario lab-window-limited "--delay 20ms" "-rcvbuf 16384" "-bytes 1500000" rx
# A reader that takes 64 kB, then stops for 300 ms, with a 32 kB buffer.
scenario lab-zero-window "--delay 10ms" "-rcvbuf 32768 -read 65536 -every 300ms" "-bytes 800000"
# 2 % random loss each way at 40 ms RTT.
scenario lab-loss-limited "--delay 20ms --loss 2%" "" "-bytes 4000000"
# A 10 Mbit/s bottleneck with a 100 ms drop-tail queue, 40 ms RTT.
scenario lab-path-limited "--delay 20ms --rate 10mbit --queue 100ms" "" "-bytes 4000000"
# The application writes 32 kB every 200 ms.
scenario lab-sender-limited "--delay 20ms" "" "-bytes 491520 -chunk 32768 -gap 200ms"

ls -l "$OUT"/lab-*.pcap
