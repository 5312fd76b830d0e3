package analyze

import (
	"net/netip"
)

// maxFlows bounds the connection table. Flows beyond it are counted in
// Stats.FlowsDropped and not analysed (a port scan must not exhaust memory).
const maxFlows = 1 << 18

// maxAnomalyPackets is how many packet numbers an anomaly keeps.
const maxAnomalyPackets = 16

// connKey identifies a TCP connection independent of direction.
type connKey struct{ lo, hi netip.AddrPort }

func keyOf(a, b netip.AddrPort) connKey {
	if a.Compare(b) > 0 {
		a, b = b, a
	}
	return connKey{a, b}
}

// hsOpts are the options one side announced in its SYN.
type hsOpts struct {
	seen     bool
	isn      uint32
	mss      int
	wscale   int // -1: not offered
	sackPerm bool
	ts       bool
}

// conn is the analysis state of one TCP connection.
type conn struct {
	id      int
	ignored bool              // filtered out: counted, not analysed
	ep      [2]netip.AddrPort // ep[0] sent the SYN (or the first packet seen)
	first   int64
	last    int64
	packets int

	syn    [2]hsOpts // [0]: SYN, [1]: SYN-ACK
	synT   int64
	synAck int64
	hsRTT  int64 // SYN to the ACK of the SYN-ACK, ns; 0 if not seen
	rst    bool
	fin    [2]bool

	dir       [2]dirState // dir[i]: data sent by ep[i]
	ts        [2]tsTrack  // ts[i]: ep[i]'s TSvals and their echoes
	anomalies []*Anomaly
}

// Anomaly is a middlebox or protocol anomaly found in a flow.
type Anomaly struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Packets []int  `json:"packets"` // packet numbers (1-based, as in Wireshark), the first few
	Detail  string `json:"detail"`  // what the first occurrence looked like
}

// flag records one occurrence of the named anomaly at packet pkt; detail is
// built only for the first occurrence.
func (c *conn) flag(name string, pkt int, detail func() string) {
	for _, a := range c.anomalies {
		if a.Name == name {
			a.Count++
			if len(a.Packets) < maxAnomalyPackets && a.Packets[len(a.Packets)-1] != pkt {
				a.Packets = append(a.Packets, pkt)
			}
			return
		}
	}
	c.anomalies = append(c.anomalies, &Anomaly{Name: name, Count: 1, Packets: []int{pkt}, Detail: detail()})
}

// sackState says whether both SYNs offered SACK.
func (c *conn) sackState() string {
	switch {
	case c.syn[0].seen && !c.syn[0].sackPerm, c.syn[1].seen && !c.syn[1].sackPerm:
		return "not negotiated"
	case c.syn[0].seen && c.syn[1].seen:
		return "negotiated"
	}
	return "unknown"
}

// scale returns the window shift side i applies to the windows it sends,
// and whether it is known (both SYNs seen).
func (c *conn) scale(i int) (uint, bool) {
	if !c.syn[0].seen || !c.syn[1].seen {
		return 0, false
	}
	if c.syn[0].wscale < 0 || c.syn[1].wscale < 0 {
		return 0, true
	}
	return uint(min(c.syn[i].wscale, 14)), true
}

// tracker holds every connection of a capture.
type tracker struct {
	filter *Filter
	conns  map[connKey]*conn
	order  []*conn
	stats  Stats
	t0     int64
	tEnd   int64
}

func newTracker(f *Filter) *tracker {
	return &tracker{filter: f, conns: make(map[connKey]*conn)}
}

// packet feeds one decoded segment captured at time t (ns) as packet pkt.
func (tr *tracker) packet(seg *segment, t int64, pkt int) {
	if tr.stats.TCPPackets == 0 {
		tr.t0 = t
	}
	tr.stats.TCPPackets++
	tr.tEnd = max(tr.tEnd, t)
	k := keyOf(seg.src, seg.dst)
	c := tr.conns[k]
	isSyn := seg.flags&flagSYN != 0 && seg.flags&flagACK == 0
	if c != nil && isSyn && c.reused(seg) {
		c = nil // a new connection on the same ports
	}
	if c == nil {
		if len(tr.order) >= maxFlows {
			tr.stats.FlowsDropped++
			return
		}
		c = tr.newConn(seg, t)
		tr.conns[k] = c
		tr.order = append(tr.order, c)
	}
	if c.ignored {
		return
	}
	c.packet(seg, t, pkt)
}

func (tr *tracker) newConn(seg *segment, t int64) *conn {
	c := &conn{id: len(tr.order) + 1, first: t}
	c.ep[0], c.ep[1] = seg.src, seg.dst
	if seg.flags&(flagSYN|flagACK) == flagSYN|flagACK {
		c.ep[0], c.ep[1] = seg.dst, seg.src // we missed the SYN: the SYN-ACK comes from the server
	}
	if tr.filter != nil && !tr.filter.Match(c.id, c.ep[0], c.ep[1]) {
		c.ignored = true
	}
	return c
}

// reused reports whether a SYN belongs to a new connection on the same
// 4-tuple rather than being a retransmission of this one's SYN.
func (c *conn) reused(seg *segment) bool {
	if c.rst || (c.fin[0] && c.fin[1]) {
		return true
	}
	return c.syn[0].seen && seg.seq != c.syn[0].isn
}

// packet updates the connection with one segment.
func (c *conn) packet(seg *segment, t int64, pkt int) {
	c.packets++
	c.last = max(c.last, t)
	s := 0
	if seg.src != c.ep[0] {
		s = 1
	}
	if seg.flags&flagSYN != 0 {
		c.handshake(seg, s, t)
	}
	if seg.flags&flagRST != 0 {
		c.rst = true
	}
	if seg.flags&flagFIN != 0 {
		c.fin[s] = true
	}
	if seg.badOpts {
		c.flag("malformed-options", pkt, func() string { return "TCP option list runs past the header or has a bad length" })
	}
	if c.hsRTT == 0 && c.synAck != 0 && s == 0 && seg.flags&(flagSYN|flagACK) == flagACK &&
		seg.ack == c.syn[1].isn+1 && t >= c.synT {
		c.hsRTT = max(t-c.synT, 1)
	}
	if seg.hasTS {
		c.ts[s].sent(seg.tsVal, t)
		if seg.flags&flagACK != 0 {
			// Side s echoing the other side's timestamp: the time side s
			// took to answer, seen from here (the path behind s).
			if v := c.ts[1-s].echoed(seg.tsEcr, t); v > 0 && c.dir[s].started {
				b := c.dir[s].bucket(c, t)
				b.echoMin = minSample(b.echoMin, v)
			}
		}
	}
	c.dir[s].send(c, seg, t, pkt)
	if seg.flags&flagACK != 0 {
		c.dir[1-s].ackFrom(c, 1-s, seg, t, pkt)
	}
}

// handshake records the options of a SYN (s = 0) or SYN-ACK (s = 1).
func (c *conn) handshake(seg *segment, s int, t int64) {
	h := hsOpts{seen: true, isn: seg.seq, wscale: -1, sackPerm: seg.sackPerm, ts: seg.hasTS}
	if seg.hasMSS {
		h.mss = int(seg.mss)
	}
	if seg.hasWScale {
		h.wscale = int(seg.wscale)
	}
	idx := 0
	if seg.flags&flagACK != 0 {
		idx = 1
		if c.synAck == 0 {
			c.synAck = t
		}
	} else if c.synAck == 0 {
		c.synT = t // the last SYN before the SYN-ACK (Karn)
	}
	c.syn[idx] = h
	d := &c.dir[s]
	if !d.based {
		d.based, d.base = true, seg.seq
	}
}
