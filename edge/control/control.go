// Package control is an edge's control socket ('wanopt run --control
// PATH'): the one definition of what it answers (Status, Flow), the server
// the edge runs and the client 'wanopt status', 'wanopt flows' and the lab
// bench use. A request is one line ("status" or "flows"); the answer is one
// JSON document, or {"error": "..."}.
package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/stack"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Status is the answer to "status".
type Status struct {
	Role   string        `json:"role"`
	Config string        `json:"config"`
	Uptime time.Duration `json:"uptime_ns"`
	// PeerName and PeerKey name the one peer (--peer-name, --peer-key);
	// empty for a hub or upstreams, whose Peers name themselves.
	PeerName string  `json:"peer_name,omitempty"`
	PeerKey  string  `json:"peer_public_key,omitempty"`
	Tunnel   *Tunnel `json:"tunnel,omitempty"` // nil: down
	// TunnelState is the one peer's tunnel's life, also while it is
	// down: up or down since when, its handshakes, the last error (nil
	// for a hub or upstreams: each Peer has its own).
	TunnelState *TunnelState `json:"tunnel_state,omitempty"`
	// Refused counts the handshake initiations this edge refused over
	// its life (a far edge's, or a hub's), whichever tunnel was up: the
	// other edge does not know this one's key, or this one does not know
	// the other's.
	Refused *Refused      `json:"handshakes_refused,omitempty"`
	Ingress *stack.Stats  `json:"ingress,omitempty"`
	Bridge  ingress.Stats `json:"bridge"`
	Egress  egress.Stats  `json:"egress"`
	Memory  Memory        `json:"memory"`
	// Peers are a hub's branches (--branch), each with its tunnel (nil:
	// down) and its egress (Egress is then their sum), or a near edge's
	// upstreams (--upstream), each with its tunnel and routes. Hub counts what the
	// hub's socket could not deliver (initiations from unknown keys).
	Peers []Peer           `json:"peers,omitempty"`
	Hub   *driver.HubStats `json:"hub,omitempty"`
	// DatagramIngress counts the clients' UDP and pings this edge
	// intercepted and sent through the tunnels (nil without a TUN);
	// DatagramEgress those it sent on to servers for its peers (for a hub
	// the sum of its branches' Peer.Datagrams). Up is client to server.
	DatagramIngress *dgram.Stats `json:"datagram_ingress,omitempty"`
	DatagramEgress  *dgram.Stats `json:"datagram_egress,omitempty"`
}

// Peer is one branch of a hub, or one upstream of a near edge.
type Peer struct {
	Name   string   `json:"name"`
	Key    string   `json:"public_key"`
	Policy string   `json:"policy,omitempty"` // a hub's branch: what its flows may reach
	Routes []string `json:"routes,omitempty"` // a near edge's upstream: the destinations it carries
	Tunnel *Tunnel  `json:"tunnel,omitempty"`
	// TunnelState is the peer's tunnel's life (see Status.TunnelState).
	TunnelState *TunnelState `json:"tunnel_state,omitempty"`
	Egress      egress.Stats `json:"egress"`
	// Datagrams counts a hub's branch's UDP and pings, sent on to the
	// servers under the branch's policy (up) and answered (down); nil for
	// an upstream, whose datagrams the edge's DatagramIngress counts.
	Datagrams *dgram.Stats `json:"datagrams,omitempty"`
}

// TunnelState is what the edge knows of a tunnel, also while none is up.
type TunnelState struct {
	State string `json:"state"` // "up" or "down"
	// Peer is the peer's address: the one dialled, or the one its last
	// handshake came from (empty: none yet).
	Peer string `json:"peer,omitempty"`
	// Host is the host name the initiator resolves Peer from (--peer or
	// --upstream HOST:PORT), looked up again while the tunnel is down;
	// empty when an address was given.
	Host string `json:"host,omitempty"`
	// Since is when the tunnel came up or went down (or the edge started).
	Since time.Time `json:"since"`
	// LastHandshake is when the last handshake (or rekey) completed; zero:
	// none yet.
	LastHandshake time.Time `json:"last_handshake,omitzero"`
	// HandshakeAttempts counts the initiations this edge sent since the
	// tunnel was last up (0 for a responder, which sends none).
	HandshakeAttempts uint64 `json:"handshake_attempts"`
	// LastError is why the last tunnel closed or the last attempt failed,
	// in one line.
	LastError string `json:"last_error,omitempty"`
}

// Refused counts the handshake initiations an edge refused, by why.
type Refused struct {
	// BadMAC: no valid mac1, so the sender lacks this edge's public key
	// (its --peer-key names another edge). Unauthenticated: mac1 was
	// right but message 1 did not decrypt (forged or corrupted).
	// UnknownKey: an initiator whose key this edge does not know (give it
	// as --peer-key or --branch). Replays: an initiation not newer than
	// one accepted before. RateLimited: dropped by the handshake gate's
	// rate limits.
	BadMAC          uint64 `json:"bad_mac"`
	Unauthenticated uint64 `json:"unauthenticated"`
	UnknownKey      uint64 `json:"unknown_key"`
	Replays         uint64 `json:"replays"`
	RateLimited     uint64 `json:"rate_limited"`
	// Last is the latest refusal (nil: none).
	Last *Refusal `json:"last,omitempty"`
}

// Total is the sum of the counts.
func (r Refused) Total() uint64 {
	return r.BadMAC + r.Unauthenticated + r.UnknownKey + r.Replays + r.RateLimited
}

// Refusal is one refused initiation.
type Refusal struct {
	At     time.Time `json:"at"`
	From   string    `json:"from"`
	Reason string    `json:"reason"` // bad_mac, unauthenticated, unknown_key, replay or rate_limited
	// Key is the initiator's public key (base64), when the handshake
	// revealed it (unknown_key, replay).
	Key string `json:"public_key,omitempty"`
}

// Memory is the flows' share of the memory budget (--memory-mib): the
// floors of the flows admitted and the grants of the streaming ones. The
// tunnel's stream buffers are counted in Tunnel.
type Memory struct {
	Flows           int64  `json:"flows"`
	MaxFlows        int64  `json:"max_flows"`
	FloorBytes      int64  `json:"floor_bytes"`
	GrantedBytes    int64  `json:"granted_bytes"`
	GrantLimitBytes int64  `json:"grant_limit_bytes"`
	FlowsRefused    uint64 `json:"flows_refused"`
	Grants          uint64 `json:"grants"`
	GrantsRefused   uint64 `json:"grants_refused"`
}

// Tunnel is the tunnel of the moment.
type Tunnel struct {
	Peer          string        `json:"peer"`
	Congestion    string        `json:"congestion"`
	Cipher        string        `json:"cipher"`
	SmoothedRTT   time.Duration `json:"srtt_ns"`
	MinRTT        time.Duration `json:"min_rtt_ns"`
	BandwidthBps  uint64        `json:"bandwidth_bps"`
	PacingRateBps uint64        `json:"pacing_rate_bps"`
	// RateCapBps is the cap a hub's --hub-rate puts on the tunnel's pace
	// (its fair share of the link), 0 if none.
	RateCapBps    uint64 `json:"rate_cap_bps,omitempty"`
	Cwnd          int    `json:"cwnd"`
	InFlight      int    `json:"in_flight"`
	BytesSent     uint64 `json:"bytes_sent"`
	BytesReceived uint64 `json:"bytes_received"`
	// Packets each way, the rate at which the peer delivers stream data
	// to this edge (measured), and how long ago the session in use was
	// keyed (handshake or rekey).
	PacketsSent     uint64        `json:"packets_sent"`
	PacketsReceived uint64        `json:"packets_received"`
	RecvRateBps     uint64        `json:"recv_rate_bps"`
	HandshakeAge    time.Duration `json:"handshake_age_ns"`
	PacketsLost     uint64        `json:"packets_lost"`
	Retransmitted   uint64        `json:"stream_bytes_retransmitted"`
	PTOs            uint64        `json:"ptos"` // probe timeouts (an outage shows as a run of them)
	StreamsOpen     int           `json:"streams_open"`
	// The stream memory budget: in use and limit.
	BudgetUsedBytes uint64 `json:"budget_used_bytes"`
	BudgetBytes     uint64 `json:"budget_bytes"`
	// UnreadBytes is what the peer sent on the flows' streams and the
	// flows have not taken yet: large and steady, some clients or
	// servers are not reading what they asked for.
	UnreadBytes uint64 `json:"unread_bytes"`
	// BBR's state and its ProbeRTT episodes so far (BBR only).
	BBRMode   string `json:"bbr_mode,omitempty"`
	ProbeRTTs int    `json:"probe_rtts"`
	// Security counters of this tunnel: datagrams that failed
	// authentication, replayed data packets, handshake initiations that
	// were replays or came from keys not allowed, handshakes declined
	// because the client still held the live session (a forged REJECT),
	// sessions replaced because the client restarted, and REJECTs sent.
	DroppedUnauthenticated uint64 `json:"dropped_unauthenticated"`
	DroppedReplays         uint64 `json:"dropped_replays"`
	HandshakeReplays       uint64 `json:"handshake_replays"`
	HandshakesRefused      uint64 `json:"handshakes_refused"`
	ResumesDeclined        uint64 `json:"resumes_declined"`
	ClientRestarts         uint64 `json:"client_restarts"`
	RejectsSent            uint64 `json:"rejects_sent"`
	Rekeys                 uint64 `json:"rekeys"` // sessions replaced by a rekey (every 2 minutes)
	// The handshake gate (far edge): initiations without a valid mac1,
	// cookie replies sent under load, initiations dropped by its rate
	// limits.
	HandshakesBadMAC      uint64 `json:"handshakes_bad_mac"`
	CookiesSent           uint64 `json:"cookies_sent"`
	HandshakesRateLimited uint64 `json:"handshakes_rate_limited"`
	// Unreliable datagrams (UDP and ping, package dgram) sent and
	// received, and those the tunnel dropped: its queues were full (the
	// datagrams came faster than the tunnel's pace) or none claimed them.
	DatagramsSent     uint64 `json:"datagrams_sent"`
	DatagramsReceived uint64 `json:"datagrams_received"`
	DatagramsDropped  uint64 `json:"datagrams_dropped"`
	// Path MTU discovery toward the peer (each direction finds its own):
	// the UDP payload size of the tunnel's packets now (the largest the
	// path was found to carry, 1,232 until a probe confirms more), the
	// ceiling searched up to (--tunnel-mtu less the IP and UDP headers),
	// whether a search runs, probes lost (each size too big costs three),
	// and fallbacks to 1,232 after full-size packets vanished.
	PathMTUBytes     int    `json:"path_mtu_bytes"`
	PathMTUCeiling   int    `json:"path_mtu_ceiling_bytes"`
	PathMTUSearching bool   `json:"path_mtu_searching,omitempty"`
	PMTUProbesLost   uint64 `json:"pmtu_probes_lost"`
	PMTUBlackHoles   uint64 `json:"pmtu_black_holes"`
}

// Flow is one line of the answer to "flows".
type Flow struct {
	Side string `json:"side"` // ingress (intercepted here) or egress (connected here)
	// Action is what the near edge's rules (--near-rule) gave the flow:
	// "optimise" (terminated, carried as a tunnel stream) or "pass" (its
	// packets carried whole as datagrams; State is then "passing" or
	// "closing", the bytes are IP packets' and Why is empty).
	Action    string `json:"action"`
	Peer      string `json:"peer,omitempty"` // the branch carrying it (a hub)
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	State     string `json:"state"`
	BytesUp   uint64 `json:"bytes_up"`
	BytesDown uint64 `json:"bytes_down"`
	// RateUpBps and RateDownBps are the rates over the last second.
	RateUpBps   uint64 `json:"rate_up_bps"`
	RateDownBps uint64 `json:"rate_down_bps"`
	// TunnelRTT is the tunnel's smoothed RTT, which every flow crosses
	// (0: tunnel down).
	TunnelRTT time.Duration `json:"tunnel_srtt_ns"`
	Age       time.Duration `json:"age_ns"`
	// Why names what limits the flow now, as this edge sees it: the LAN
	// end's window ("client-window", "server-window") or sending
	// ("client-sends", "server-sends"), the tunnel's congestion control
	// ("tunnel"), the memory budget ("memory"), the other edge's side
	// ("far-edge", "near-edge": ask it), or "idle".
	Why string `json:"why"`
}

// Source answers the requests: the running edge.
type Source interface {
	Status() Status
	Flows() []Flow
	// Reload reads the edge's configuration again and applies it, or
	// refuses it (see edge.Near.Reload).
	Reload() (changed []string, err error)
}

// Reloaded is the answer to "reload": what changed, or why the new
// configuration was refused (the running one stays).
type Reloaded struct {
	Changed []string `json:"changed"`
	Error   string   `json:"error,omitempty"`
}

// Serve listens on the unix socket path and answers requests from src
// until the returned stop function is called (which waits for its
// goroutines and removes the socket). The socket is mode 0660: whoever
// may read it may see the edge's flows. A socket left by an edge that was
// killed is replaced; one another edge answers on is an error.
func Serve(path string, src Source, log *slog.Logger) (stop func(), err error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another wanopt is running there; stop it or choose another path", path)
		}
		os.Remove(path) // stale, from a run that was killed
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		why := err.Error()
		switch {
		case errors.Is(err, syscall.ENOENT):
			why = "the directory " + filepath.Dir(path) + " does not exist"
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			why = "permission denied in " + filepath.Dir(path)
		case errors.Is(err, syscall.EINVAL) && len(path) > 100:
			why = "the path is too long for a unix socket (at most 107 bytes)"
		}
		return nil, fmt.Errorf("control socket %s: %s (choose a writable path)", path, why)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				answer(c, src)
			}()
		}
	}()
	log.Info("control socket listening", "path", path)
	return func() {
		ln.Close()
		wg.Wait()
	}, nil
}

// answer reads one request from c and writes the answer.
func answer(c net.Conn, src Source) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
	if err != nil {
		return
	}
	var v any
	switch req := strings.TrimSpace(line); req {
	case "status":
		v = src.Status()
	case "flows":
		v = src.Flows()
	case "reload":
		changed, err := src.Reload()
		r := Reloaded{Changed: changed}
		if err != nil {
			r.Error = err.Error()
		}
		v = r
	default:
		v = map[string]string{"error": fmt.Sprintf("unknown request %q: want status, flows or reload", req)}
	}
	json.NewEncoder(c).Encode(v)
}
