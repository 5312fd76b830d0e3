package flow

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

const smallBuf, bigBuf = 4 << 10, 64 << 10

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	bigPool   = sync.Pool{New: func() any { b := make([]byte, bigBuf); return &b }}
)

// idleWaiter is a source that can wait for data without a buffer (the
// netstack's end of a flow): the copy then holds no buffer while idle.
type idleWaiter interface {
	Readable() bool
	WaitReadable()
}

// gatherer is a source that gathers a read (a tunnel stream): see
// coalesceWait.
type gatherer interface {
	ReadGather(p []byte, atLeast int, wait time.Duration) (int, error)
}

// Lender is a destination that lends room in its own buffer for a copy to
// read straight into (a tunnel stream: driver.Stream.Lend), which saves
// the copy a memmove of every byte. Lend commits the first filled bytes of
// the room the previous call lent, then lends room for up to want more
// (none when want is 0), blocking while it has none; every call that lent
// room is followed by another.
type Lender interface {
	Lend(filled, want int) ([][]byte, error)
}

// BuffersReader is a source that reads into several buffers with one call
// (readv), such as the egress's kernel TCP connection: a copy fills lent
// room spanning several of the lender's blocks in one read.
type BuffersReader interface {
	ReadBuffers(bufs [][]byte) (int, error)
}

// copyAdaptive copies src to dst until src ends, counting bytes in n (if
// not nil). It holds a small pooled buffer while the flow trickles and a
// large one while reads fill the buffer or the flow streams, if g grants
// it (nil: always); when src can wait for data without a buffer, it holds
// none while idle, and gives g back. Where lend is not nil (dst's Lender),
// it reads into room lent by dst instead of the large buffer. It returns
// src's error (io.EOF at a clean end) or dst's error.
func copyAdaptive(dst io.Writer, lend Lender, src io.Reader, n *atomic.Uint64, g *grant, wait *waitState) (rerr, werr error) {
	waiter, canWait := src.(idleWaiter)
	gather, canGather := src.(gatherer)
	var lastData time.Time // when the previous read returned data
	var small, big *[]byte
	large := false // reads go to big, or to lent room
	release := func() {
		if small != nil {
			smallPool.Put(small)
		}
		if big != nil {
			bigPool.Put(big)
		}
		small, big, large = nil, nil, false
	}
	takeLarge := func() {
		release()
		large = true
		if lend == nil {
			big = bigPool.Get().(*[]byte)
		}
	}
	defer func() { release(); g.giveBack(true) }()
	for {
		if canWait && !waiter.Readable() {
			release()
			g.giveBack(false)
			wait.set(WaitRead)
			waiter.WaitReadable()
		}
		streaming := canGather && time.Since(lastData) < streamingGap
		if streaming && !large && g.take() {
			takeLarge()
		}
		if large && lend != nil {
			k, rerr, werr := copyLent(lend, src, n, wait)
			if rerr != nil || werr != nil {
				return rerr, werr
			}
			if canGather && k > 0 {
				lastData = time.Now()
			}
			// A short read (the flow trickles now) or nothing to read.
			release()
			g.giveBack(false)
			continue
		}
		if small == nil && !large {
			small = smallPool.Get().(*[]byte)
		}
		var buf []byte
		if big != nil {
			buf = *big
		} else {
			buf = *small
		}
		var k int
		var err error
		wait.set(WaitRead)
		if streaming {
			k, err = gather.ReadGather(buf[:min(len(buf), coalesceBytes)], coalesceBytes, coalesceWait)
		} else {
			k, err = src.Read(buf)
		}
		if k > 0 {
			if canGather {
				lastData = time.Now()
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return nil, werr
			}
			if n != nil {
				n.Add(uint64(k))
			}
			switch {
			case !large && g.wantsBig(k, len(buf)) && g.take():
				takeLarge()
			case k < smallBuf && large && !streaming:
				release()
				small = smallPool.Get().(*[]byte)
				g.giveBack(false)
			}
		}
		if err != nil {
			return err, nil
		}
	}
}

// copyLent copies src into room lent by dst while reads fill at least
// smallBuf (or all the room lent): it returns after the first shorter read,
// its bytes committed, with their count, or with src's or dst's error. A
// source that can tell it has nothing to read (the netstack's end) is not
// waited on with room lent: copyLent returns then, to wait without it. A
// kernel socket cannot tell without a system call, so its read may wait
// with the room lent.
func copyLent(dst Lender, src io.Reader, n *atomic.Uint64, wait *waitState) (k int, rerr, werr error) {
	waiter, canWait := src.(idleWaiter)
	want := bigBuf
	for {
		if canWait && !waiter.Readable() {
			want = 0
		}
		room, err := dst.Lend(k, want) // commits the previous read's k bytes
		if err != nil {
			return 0, nil, err
		}
		if n != nil {
			n.Add(uint64(k))
		}
		if want == 0 {
			return k, rerr, nil
		}
		wait.set(WaitRead)
		k, rerr = readRoom(src, room)
		if rerr != nil || k < smallBuf && k < roomBytes(room) {
			want = 0 // a short read: commit it and return
		}
	}
}

// readRoom reads from src into room in order: with one readv where src is
// a BuffersReader, otherwise a Read per buffer while the previous one
// filled its buffer and src, if it can tell, has more without waiting.
func readRoom(src io.Reader, room [][]byte) (int, error) {
	if vr, ok := src.(BuffersReader); ok && len(room) > 1 {
		return vr.ReadBuffers(room)
	}
	waiter, canWait := src.(idleWaiter)
	k := 0
	for i, b := range room {
		if i > 0 && (!canWait || !waiter.Readable()) {
			break
		}
		m, err := src.Read(b)
		k += m
		if err != nil || m < len(b) {
			return k, err
		}
	}
	return k, nil
}

func roomBytes(room [][]byte) int {
	n := 0
	for _, b := range room {
		n += len(b)
	}
	return n
}

// Gathering a tunnel stream's data. The tunnel delivers a bulk flow a
// packet or two at a time, and the near edge's netstack sends each Write
// to the client at once: one TUN write and about one client ACK per 2 KB,
// the near edge's largest CPU cost. So while data streams (the previous
// read returned data within streamingGap), a read gathers up to
// coalesceBytes, waiting about coalesceWait after its first bytes, and the
// netstack sends them as one large TSO segment (driver.Stream's
// ReadGather fills the buffer as data arrives).
//
// The first read after a pause is never delayed, so an answer or a
// keystroke goes out at once, and a stream that falls quiet (no bytes for
// twice the tunnel reader's hold) is answered then. The wait is 8 ms so
// that slower flows, and flows sharing a link's rate, gather too (`wanbench
// cisco --rate 50mbit --rtt 100ms`); a streaming flow's bytes wait at most
// that and a hold. 63 KiB is the largest TSO segment the netstack sends
// (its 65,000-byte GSO limit less headers): one gathered read is one TUN
// write and about one client ACK, where 64 KiB would go as two.
const (
	coalesceWait  = 8 * time.Millisecond
	coalesceBytes = 63 << 10
	streamingGap  = 2 * time.Millisecond
)
