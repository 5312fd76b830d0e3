package analyze

import (
	"container/heap"
	"math/rand"
)

// This file is a tiny, deterministic TCP transfer simulator used only to
// build the hand-made test captures: one sender, one bottleneck link, one
// receiver with a finite buffer and an application that reads at a set
// pace. The capture point is at the sender.

// simPkt is one captured segment, as seen at the capture point.
type simPkt struct {
	t        int64 // ns
	fromCli  bool  // client → server (the client is the data sender)
	seq, ack uint32
	flags    uint8
	win      uint16
	n        int         // payload bytes
	sack     [][2]uint32 // SACK blocks, absolute sequence numbers
	syn      *synOpts
}

type synOpts struct {
	mss      uint16
	wscale   int // -1: none
	sackPerm bool
}

// simParams describe one transfer.
type simParams struct {
	total     int64   // bytes the application sends
	mss       int64   // segment size
	rtt       int64   // ns, propagation round trip
	rateBps   float64 // bottleneck rate
	rcvBuf    int64   // receiver buffer (bytes)
	wscale    int     // receiver window shift (-1: no scaling offered)
	cwnd      int64   // initial congestion window, bytes
	aimd      bool    // Reno-style growth and halving on loss
	lossP     float64 // random loss probability per data segment (first transmissions only)
	seed      int64
	readRate  float64 // receiver application read rate, bytes/s (0: immediate)
	readEvery int64   // ns between application reads when readRate > 0
	chunk     int64   // application writes this many bytes …
	chunkGap  int64   // … every chunkGap ns (0: all at once)
	sack      bool    // both sides offer SACK-permitted
}

const (
	cISN = 1000000
	sISN = 4000000000 // close to wrap-around on purpose
)

type simEvent struct {
	t    int64
	kind int
	a, b int64
	w    int64
	sack [][2]int64
	seq  int // tie-breaker for determinism
}

const (
	evArrive = iota // data segment [a, b) reaches the receiver
	evAck           // ACK a with window w (and sack) reaches the sender
	evRead          // receiver application reads
	evWrite         // sender application writes a chunk
	evRTO           // retransmission timer check
)

type evHeap []*simEvent

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(*simEvent)) }
func (h *evHeap) Pop() any {
	o := *h
	e := o[len(o)-1]
	*h = o[:len(o)-1]
	return e
}

// simulate runs the transfer and returns the captured packets, handshake
// first. Offsets a, b are relative to the first data byte.
func simulate(p simParams) []simPkt {
	rng := rand.New(rand.NewSource(p.seed))
	var out []simPkt
	var h evHeap
	nseq := 0
	push := func(e *simEvent) { nseq++; e.seq = nseq; heap.Push(&h, e) }
	shift := max(p.wscale, 0)
	winField := func(w int64) uint16 { return uint16(min(w>>shift, 65535)) }
	ws := p.wscale

	// Handshake, captured at the client.
	out = append(out,
		simPkt{t: 0, fromCli: true, seq: cISN, flags: flagSYN, win: 65535, syn: &synOpts{1460, 7, p.sack}},
		simPkt{t: p.rtt, fromCli: false, seq: sISN, ack: cISN + 1, flags: flagSYN | flagACK, win: uint16(min(p.rcvBuf, 65535)), syn: &synOpts{1460, ws, p.sack}},
		simPkt{t: p.rtt + 10e3, fromCli: true, seq: cISN + 1, ack: sISN + 1, flags: flagACK, win: 65535})
	start := p.rtt + 20e3
	dataSeq := func(off int64) uint32 { return uint32(cISN + 1 + off) }

	// Sender state.
	var una, nxt, avail int64
	cwnd, rwnd := p.cwnd, p.rcvBuf
	dup, recover, inRecovery := 0, int64(0), false
	linkFree := start
	lastProgress := start
	retransmitted := map[int64]bool{}
	// Receiver state.
	var rnxt, read int64
	var ooo rangeSet
	rcvWin := func() int64 {
		w := max(p.rcvBuf-(rnxt-read), 0)
		if w < p.mss { // receiver silly-window avoidance: advertise zero
			w = 0
		}
		return w
	}
	sendAck := func(t int64) {
		var blocks [][2]int64
		if p.sack {
			for i := len(ooo.s) - 1; i >= 0 && len(blocks) < 3; i-- {
				blocks = append(blocks, [2]int64{ooo.s[i].l, ooo.s[i].r})
			}
		}
		push(&simEvent{t: t + p.rtt/2, kind: evAck, a: rnxt, w: rcvWin(), sack: blocks})
	}
	sendSeg := func(t, a, b int64, retrans bool) {
		out = append(out, simPkt{t: t, fromCli: true, seq: dataSeq(a), ack: sISN + 1, flags: flagACK | flagPSH, win: 65535 >> 7, n: int(b - a)})
		dep := max(t, linkFree) + int64(float64(b-a+40)*8/p.rateBps*1e9)
		linkFree = dep
		if !retrans && p.lossP > 0 && rng.Float64() < p.lossP {
			return
		}
		push(&simEvent{t: dep + p.rtt/2, kind: evArrive, a: a, b: b})
	}
	trySend := func(t int64) {
		if nxt == una {
			lastProgress = t // restarting after idle: the timer starts now
		}
		for nxt < avail {
			room := min(cwnd, rwnd) - (nxt - una)
			n := min(p.mss, avail-nxt)
			if room < n {
				return
			}
			sendSeg(t, nxt, nxt+n, false)
			nxt += n
			t += 1e3 // 1 µs between back-to-back sends keeps timestamps ordered
		}
	}
	if p.chunkGap > 0 {
		for i, t := int64(0), start; i*p.chunk < p.total; i, t = i+1, t+p.chunkGap {
			push(&simEvent{t: t, kind: evWrite, a: min(p.chunk, p.total-i*p.chunk)})
		}
	} else {
		push(&simEvent{t: start, kind: evWrite, a: p.total})
	}
	if p.readRate > 0 {
		push(&simEvent{t: start + p.readEvery, kind: evRead})
	}
	push(&simEvent{t: start + 4*p.rtt, kind: evRTO})

	for h.Len() > 0 {
		e := heap.Pop(&h).(*simEvent)
		t := e.t
		switch e.kind {
		case evWrite:
			avail += e.a
			trySend(t)
		case evArrive:
			space := rcvWin()
			if e.b <= rnxt || e.b-rnxt > space { // duplicate, or no room: drop, re-ACK
				sendAck(t)
				break
			}
			if e.a <= rnxt {
				rnxt = e.b
				for len(ooo.s) > 0 && ooo.s[0].l <= rnxt {
					rnxt = max(rnxt, ooo.s[0].r)
					ooo.s = ooo.s[1:]
				}
			} else {
				ooo.add(e.a, e.b)
			}
			if p.readRate == 0 {
				read = rnxt
			}
			sendAck(t)
		case evRead:
			before := rcvWin()
			read = min(rnxt, read+int64(p.readRate*float64(p.readEvery)/1e9))
			if before < p.mss && rcvWin() >= p.mss { // window update
				push(&simEvent{t: t + p.rtt/2, kind: evAck, a: rnxt, w: rcvWin()})
			}
			if una < p.total || read < rnxt {
				push(&simEvent{t: t + p.readEvery, kind: evRead})
			}
		case evAck:
			pk := simPkt{t: t, seq: sISN + 1, ack: dataSeq(e.a), flags: flagACK, win: winField(e.w)}
			for _, s := range e.sack {
				pk.sack = append(pk.sack, [2]uint32{dataSeq(s[0]), dataSeq(s[1])})
			}
			out = append(out, pk)
			rwnd = e.w
			switch {
			case e.a > una:
				una = e.a
				lastProgress = t
				dup = 0
				if inRecovery && una < recover {
					sendSeg(t, una, min(una+p.mss, nxt), true) // partial ACK: next hole
				} else {
					inRecovery = false
					if p.aimd {
						cwnd += p.mss * p.mss / cwnd
					}
				}
			case e.a == una && nxt > una && len(e.sack) > 0 || e.a == una && nxt > una && p.lossP > 0:
				dup++
				if dup == 3 && !inRecovery {
					inRecovery, recover = true, nxt
					if p.aimd {
						cwnd = max(cwnd/2, 2*p.mss)
					}
					retransmitted[una] = true
					sendSeg(t, una, min(una+p.mss, nxt), true)
				}
			}
			trySend(t + 1e3)
		case evRTO:
			if una >= p.total {
				break
			}
			if nxt > una && t-lastProgress > 3*p.rtt {
				if p.aimd {
					cwnd = 2 * p.mss
				}
				inRecovery, recover = true, nxt
				sendSeg(t, una, min(una+p.mss, nxt), true)
				lastProgress = t
			}
			push(&simEvent{t: t + p.rtt, kind: evRTO})
		}
	}
	return out
}
