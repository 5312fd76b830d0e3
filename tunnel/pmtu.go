package tunnel

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Path MTU discovery (datagram PLPMTUD, RFC 8899). Sizes are UDP payload
// bytes: the datagrams PollTransmit returns.
const (
	// BasePLPMTUBytes is the size a connection sends at until a probe has
	// confirmed a larger one, and falls back to when a black hole is
	// detected: the IPv6 minimum MTU (1280) less the IPv6 and UDP headers,
	// which every IPv4 and IPv6 path should carry.
	BasePLPMTUBytes = 1280 - ipv6UDPHeaderBytes
	// PMTUMaxProbes is RFC 8899's MAX_PROBES: a size whose probe is lost
	// this many times in a row is taken as too big for the path.
	PMTUMaxProbes = 3
	// PMTURaiseInterval is how long a search that ended below the ceiling
	// waits before searching again (RFC 8899's PMTU_RAISE_TIMER is 600 s;
	// a tunnel outlives routing changes, and a search costs a few probes).
	PMTURaiseInterval = 30 * time.Second
	// pmtuBlackHoleLosses is how many packets larger than the base,
	// lost with none of them acknowledged in between, while a packet no
	// larger than the base was acknowledged, make the path a black hole
	// for the size in use (RFC 8899 §4.3): the size falls back to the base
	// and the search starts again.
	pmtuBlackHoleLosses = 8
	// minPMTUProbeTimeout floors a probe's timeout: an ACK is delayed up
	// to the peer's max ack delay, and a short path's PTO is tiny.
	minPMTUProbeTimeout = 10 * time.Millisecond
)

// pmtud is a connection's path MTU search. Its sizes are datagram bytes.
// Probes are ack-eliciting packets (PING and PADDING) that the loss
// recovery tracks but does not count as in flight, so a lost probe is
// neither congestion nor a reason for a PTO, and carries no data to
// retransmit.
//
// The search: probe the ceiling first (the common case is a path that
// carries it), then halve the interval between the largest size
// confirmed (size) and the smallest found too big (hi) until they meet.
// Each probe is sent once at a time; a probe not acknowledged within its
// timeout (or declared lost) counts as lost, and PMTUMaxProbes losses of
// one size make it hi.
type pmtud struct {
	base, ceiling int
	size          int // the confirmed size: what data packets may use

	searching bool
	hi        int // the smallest size deemed too big (ceiling+1: none)

	probeSize     int    // size of the probe in flight, 0 if none
	probeID       uint64 // names the probe in flight; earlier IDs are stale
	probeDeadline monotime.Time
	probeLosses   int           // losses of probeSize in a row
	raiseAt       monotime.Time // next search after one completed below the ceiling

	// Black-hole detection.
	bigLostRun    int  // packets > base lost since the last ack of one
	smallAckedRun bool // a packet <= base was acked during that run

	stats PathMTUStats
}

// PathMTUStats describes a connection's path MTU search.
type PathMTUStats struct {
	// PathMTUBytes is the datagram size data packets use now: the largest
	// confirmed on the path (BasePLPMTUBytes until a probe confirms more;
	// the ceiling if the ceiling is no larger).
	PathMTUBytes int
	// PathMTUCeilingBytes is the largest size searched for
	// (Config.MaxUDPPayloadBytes).
	PathMTUCeilingBytes int
	// PathMTUSearching is true while a search runs.
	PathMTUSearching bool
	// PMTUProbesSent, PMTUProbesAcked and PMTUProbesLost count probes.
	PMTUProbesSent, PMTUProbesAcked, PMTUProbesLost uint64
	// PMTUBlackHoles counts fallbacks to the base size after packets
	// larger than it kept being lost while smaller ones got through.
	PMTUBlackHoles uint64
}

func newPMTUD(ceiling int) pmtud {
	base := min(BasePLPMTUBytes, ceiling)
	return pmtud{base: base, ceiling: ceiling, size: base, hi: ceiling + 1}
}

// start begins a search from the confirmed size up to the ceiling.
func (m *pmtud) start() {
	m.raiseAt = 0
	if m.size >= m.ceiling {
		return
	}
	m.searching = true
	m.hi = m.ceiling + 1
	m.probeLosses = 0
}

// nextProbe returns the size to probe next, or 0 when the search is done
// or a probe is in flight.
func (m *pmtud) nextProbe() int {
	if !m.searching || m.probeSize != 0 {
		return 0
	}
	if m.hi == m.ceiling+1 {
		return m.ceiling
	}
	return m.size + (m.hi-m.size)/2
}

// probeDue reports whether a probe waits to be sent.
func (m *pmtud) probeDue() bool { return m.nextProbe() != 0 }

// onProbeSent records that the probe of size went out at now, with
// timeout; it returns the probe's ID.
func (m *pmtud) onProbeSent(now monotime.Time, size int, timeout time.Duration) uint64 {
	m.probeID++
	m.probeSize = size
	m.probeDeadline = now.Add(max(timeout, minPMTUProbeTimeout))
	m.stats.PMTUProbesSent++
	return m.probeID
}

// onProbeAcked takes the acknowledgment of a probe of size: the size is
// confirmed, also when the ACK came after the probe's timeout. It returns
// true when the confirmed size changed.
func (m *pmtud) onProbeAcked(id uint64, size int, now monotime.Time) bool {
	m.stats.PMTUProbesAcked++
	if id == m.probeID && m.probeSize != 0 {
		m.probeSize = 0
		m.probeLosses = 0
	}
	if size <= m.size {
		return false // stale: a larger size is confirmed already
	}
	if size >= m.hi {
		// The ACK came after the probes of this size were given up on: the
		// path carries it after all. Sizes above it stay unknown until the
		// next search.
		m.hi = size + 1
	}
	m.size = size
	m.maybeComplete(now)
	return true
}

// onProbeLost counts the loss of the probe in flight (its timeout, or the
// loss recovery declared it lost); a stale probe's loss is ignored.
func (m *pmtud) onProbeLost(id uint64, now monotime.Time) {
	if id != m.probeID || m.probeSize == 0 {
		return
	}
	m.stats.PMTUProbesLost++
	size := m.probeSize
	m.probeSize = 0
	m.probeLosses++
	if m.probeLosses < PMTUMaxProbes {
		return
	}
	m.probeLosses = 0
	m.hi = size
	m.maybeComplete(now)
}

// tooBig takes size as too big without probing it (the caller cannot
// send it).
func (m *pmtud) tooBig(size int, now monotime.Time) {
	if size < m.hi {
		m.hi = size
	}
	m.probeSize = 0
	m.maybeComplete(now)
}

// maybeComplete ends the search when no size is left between size and hi.
func (m *pmtud) maybeComplete(now monotime.Time) {
	if m.hi-m.size > 1 {
		return
	}
	m.searching = false
	m.probeSize = 0
	if m.size < m.ceiling {
		m.raiseAt = now.Add(PMTURaiseInterval)
	}
}

// onTimeout runs the probe and raise timers.
func (m *pmtud) onTimeout(now monotime.Time) {
	if m.probeSize != 0 && !now.Before(m.probeDeadline) {
		m.onProbeLost(m.probeID, now)
	}
	if !m.searching && m.raiseAt != 0 && !now.Before(m.raiseAt) {
		m.start()
	}
}

// nextTimeout returns the earliest of the probe and raise timers, or 0.
func (m *pmtud) nextTimeout() monotime.Time {
	if m.probeSize != 0 {
		return m.probeDeadline
	}
	if !m.searching {
		return m.raiseAt
	}
	return 0
}

// onPacketAcked and onPacketLost watch for a black hole: they see every
// tracked packet's fate, by whether it was larger than the base.
func (m *pmtud) onPacketAcked(big bool) {
	if big {
		m.bigLostRun, m.smallAckedRun = 0, false
	} else if m.bigLostRun > 0 {
		m.smallAckedRun = true
	}
}

func (m *pmtud) onPacketLost(big bool) {
	if big {
		m.bigLostRun++
	}
}

// checkBlackHole falls back to the base size and searches again when
// packets larger than the base keep being lost while smaller ones get
// through; it returns true when it did. It runs after a whole ACK is
// processed, so one ACK that acknowledges a large packet clears the run.
func (m *pmtud) checkBlackHole() bool {
	if m.bigLostRun < pmtuBlackHoleLosses || !m.smallAckedRun || m.size <= m.base {
		return false
	}
	m.stats.PMTUBlackHoles++
	m.bigLostRun, m.smallAckedRun = 0, false
	m.size = m.base
	m.probeSize = 0
	m.start()
	return true
}

// snapshot returns the stats with the current state.
func (m *pmtud) snapshot() PathMTUStats {
	s := m.stats
	s.PathMTUBytes = m.size
	s.PathMTUCeilingBytes = m.ceiling
	s.PathMTUSearching = m.searching
	return s
}
