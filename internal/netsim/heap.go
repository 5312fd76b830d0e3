package netsim

import "github.com/wanopt/wanopt/internal/monotime"

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	evTxDone eventKind = iota // a link finished serialising its head packet; id is the link
	evArrive                  // pkt reaches endpoint id
	evTimer                   // endpoint id's timer; at most one per endpoint in the heap
	evWake                    // poll endpoint id for transmissions and its timer
	evCall                    // run callback id
)

// event is one entry of the heap. Events are ordered by at, then by seq, the
// order in which they were scheduled, which makes runs deterministic.
type event struct {
	at   monotime.Time
	seq  uint64
	pkt  *packet
	id   int32
	kind eventKind
}

func (e *event) less(o *event) bool {
	return e.at < o.at || (e.at == o.at && e.seq < o.seq)
}

// eventHeap is a binary min-heap of events stored by value, allocation-free
// once grown. timerP holds the index of each endpoint's timer event, so a
// timer can be moved or removed in place.
type eventHeap struct {
	ev     []event
	timerP []int32 // heap index of each endpoint's timer event, -1 if none
}

func (h *eventHeap) len() int { return len(h.ev) }

// moved records that the event at index i changed position.
func (h *eventHeap) moved(i int) {
	if e := &h.ev[i]; e.kind == evTimer {
		h.timerP[e.id] = int32(i)
	}
}

func (h *eventHeap) push(e event) {
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	h.moved(i)
	h.up(i)
}

// pop removes and returns the earliest event. The heap must not be empty.
func (h *eventHeap) pop() event {
	top := h.ev[0]
	if top.kind == evTimer {
		h.timerP[top.id] = -1
	}
	n := len(h.ev) - 1
	if n > 0 {
		h.ev[0] = h.ev[n]
		h.moved(0)
	}
	h.ev[n] = event{}
	h.ev = h.ev[:n]
	if n > 1 {
		h.down(0)
	}
	return top
}

// remove deletes the event at index i.
func (h *eventHeap) remove(i int) {
	if e := &h.ev[i]; e.kind == evTimer {
		h.timerP[e.id] = -1
	}
	n := len(h.ev) - 1
	if i != n {
		h.ev[i] = h.ev[n]
		h.moved(i)
	}
	h.ev[n] = event{}
	h.ev = h.ev[:n]
	if i < n {
		h.fix(i)
	}
}

// fix restores heap order after the event at index i changed its key.
func (h *eventHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *eventHeap) up(i int) {
	ev := h.ev
	x := ev[i]
	for i > 0 {
		p := (i - 1) / 2
		if !x.less(&ev[p]) {
			break
		}
		ev[i] = ev[p]
		h.moved(i)
		i = p
	}
	ev[i] = x
	h.moved(i)
}

// down sifts the event at index i toward the leaves; it reports if it moved.
func (h *eventHeap) down(i int) bool {
	ev := h.ev
	n := len(ev)
	x := ev[i]
	i0 := i
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && ev[r].less(&ev[c]) {
			c = r
		}
		if !ev[c].less(&x) {
			break
		}
		ev[i] = ev[c]
		h.moved(i)
		i = c
	}
	ev[i] = x
	h.moved(i)
	return i > i0
}
