package stream

// Scheduler shares the packets of a connection fairly between the streams
// that have data to send: deficit round-robin over stream IDs, with a quantum
// of bytes per turn (about one packet's payload). A stream that overspends
// its turn (a frame larger than what was left) gets that much less on its
// next turn, so over whole rounds every active stream sends the same bytes
// within one quantum.
//
// Add, Remove, Contains and Next are O(1); nothing allocates once the
// scheduler has held its largest number of streams. It is not safe for
// concurrent use.
//
// Use: the connection Adds a stream when it becomes sendable (after Write,
// CloseWrite, OnLost, or credit from OnMaxStreamData or ConnFlow.OnMaxData).
// To fill a packet it takes Next, pops frames from that stream, and Charges
// the bytes popped; when the stream has no more data (HasData false) it
// Removes it. A stream blocked only on connection credit can be kept in a
// second Scheduler used as a parking list, and moved back on MAX_DATA.
type Scheduler struct {
	quantumBytes int
	index        map[uint64]int32 // stream ID -> node
	nodes        []schedNode
	freeNodes    []int32
	head         int32 // node whose turn it is, -1 when empty
	n            int
}

type schedNode struct {
	id         uint64
	prev, next int32
	deficit    int // bytes left in the current turn (head only), or carried overspend
}

// NewScheduler returns an empty scheduler giving each stream quantumBytes
// per turn (at least 1).
func NewScheduler(quantumBytes int) *Scheduler {
	return &Scheduler{quantumBytes: max(quantumBytes, 1), index: make(map[uint64]int32), head: -1}
}

// Len returns the number of streams scheduled.
func (s *Scheduler) Len() int { return s.n }

// Contains reports whether stream id is scheduled.
func (s *Scheduler) Contains(id uint64) bool {
	_, ok := s.index[id]
	return ok
}

// Add schedules stream id at the end of the round; it does nothing if id is
// already scheduled.
func (s *Scheduler) Add(id uint64) {
	if _, ok := s.index[id]; ok {
		return
	}
	var i int32
	if k := len(s.freeNodes); k > 0 {
		i = s.freeNodes[k-1]
		s.freeNodes = s.freeNodes[:k-1]
	} else {
		s.nodes = append(s.nodes, schedNode{})
		i = int32(len(s.nodes) - 1)
	}
	s.index[id] = i
	nd := &s.nodes[i]
	nd.id, nd.deficit = id, 0
	s.n++
	if s.head < 0 {
		nd.prev, nd.next = i, i
		s.head = i
		nd.deficit = s.quantumBytes
		return
	}
	// Insert before head: the tail of the round.
	h := &s.nodes[s.head]
	tail := h.prev
	nd.prev, nd.next = tail, s.head
	s.nodes[tail].next = i
	h.prev = i
}

// Remove unschedules stream id (its unused turn is forgotten); it does
// nothing if id is not scheduled. If it was the stream whose turn it was,
// the turn passes to the next one.
func (s *Scheduler) Remove(id uint64) {
	i, ok := s.index[id]
	if !ok {
		return
	}
	delete(s.index, id)
	s.freeNodes = append(s.freeNodes, i)
	s.n--
	nd := &s.nodes[i]
	if s.n == 0 {
		s.head = -1
		return
	}
	s.nodes[nd.prev].next = nd.next
	s.nodes[nd.next].prev = nd.prev
	if s.head == i {
		s.head = nd.next
		s.startTurn()
	}
}

// Next returns the stream whose turn it is. It does not advance the turn:
// Charge does.
func (s *Scheduler) Next() (id uint64, ok bool) {
	if s.head < 0 {
		return 0, false
	}
	return s.nodes[s.head].id, true
}

// Charge records that n bytes were sent for the stream Next returned. When
// its turn's quantum is spent, the turn passes to the next stream (an
// overspend is carried to the stream's next turn). A charge of 0 or less
// ends the turn, so a stream that sent only a FIN or could not send does
// not keep it.
func (s *Scheduler) Charge(n int) {
	if s.head < 0 {
		return
	}
	h := &s.nodes[s.head]
	if n <= 0 {
		h.deficit = min(h.deficit, 0)
	} else {
		h.deficit -= n
	}
	if h.deficit > 0 {
		return
	}
	s.head = h.next
	s.startTurn()
}

// startTurn gives the new head its quantum (on top of any carried
// overspend).
func (s *Scheduler) startTurn() {
	s.nodes[s.head].deficit += s.quantumBytes
}
