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

// copyAdaptive copies src to dst until src ends, counting bytes in n (if
// not nil). It holds a small pooled buffer while the flow trickles and a
// large one while reads fill the buffer or the flow streams, if g grants
// it (nil: always); when src can wait for data without a buffer, it holds
// none while idle, and gives g back. It returns src's error (io.EOF at a
// clean end) or dst's error.
func copyAdaptive(dst io.Writer, src io.Reader, n *atomic.Uint64, g *grant, wait *waitState) (rerr, werr error) {
	waiter, canWait := src.(idleWaiter)
	gather, canGather := src.(gatherer)
	var lastData time.Time // when the previous read returned data
	var small, big *[]byte
	release := func() {
		if small != nil {
			smallPool.Put(small)
		}
		if big != nil {
			bigPool.Put(big)
		}
		small, big = nil, nil
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
		if streaming && big == nil && g.take() {
			release()
			big = bigPool.Get().(*[]byte)
		}
		if small == nil && big == nil {
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
			case big == nil && g.wantsBig(k, len(buf)) && g.take():
				smallPool.Put(small)
				small, big = nil, bigPool.Get().(*[]byte)
			case k < smallBuf && big != nil && !streaming:
				bigPool.Put(big)
				small, big = smallPool.Get().(*[]byte), nil
				g.giveBack(false)
			}
		}
		if err != nil {
			return err, nil
		}
	}
}

// Gathering a tunnel stream's data. The tunnel delivers a bulk flow a
// packet or two at a time, and the near edge's netstack sends each Write to
// the client at once: one TUN write and about one client ACK per 2 KB
// (measured: 2.0 KB per write at 235 Mbit/s, the near edge's largest CPU
// cost). While data streams (the previous read returned data within
// streamingGap), a read gathers up to coalesceBytes, waiting about
// coalesceWait after its first bytes (the driver answers at its next
// wake-up after the wait, at most one of its reader's holds later), so
// that the netstack sends them as
// one large TSO segment. The tunnel's driver fills the buffer as data
// arrives (driver.Stream's ReadGather), so this loop wakes once per
// gathered buffer. The first read after a pause is never delayed, so a
// request's answer or a keystroke goes out at once, and a read whose
// stream falls quiet (no bytes for twice the tunnel reader's hold, 4 ms
// on a short path: the answer ended) is answered then. The wait is 8 ms so that slower flows gather
// too, and a link's rate is shared by its flows:
// at 50 Mbit/s with four flows each read gathered 3 KB in 0.5 ms (the
// near edge spent 62.6 CPU-s/GB) and 4.3 KB in 2 ms (51.0; later, after
// other changes, 17.6 to 21.5 in four runs); 4 ms gave 15.4 in two
// (wanbench cisco --rate 50mbit --rtt 100ms --bytes 25MB). At 250 Mbit/s
// no difference showed then (5.2 against 5.3). Four flows sharing 250
// Mbit/s gather 31 KB each in 4 ms; 8 ms fills the 63 KiB, and the near
// edge's TUN writes fell from about 920 to 490 a second (the quiet rule
// keeps the tails of answers from waiting the longer wait). It delays a
// streaming flow's bytes by at most the wait and a hold. A gather fills 63 KiB, the largest TSO
// segment the netstack sends (its offload endpoint's 65,000-byte GSO
// limit less headers: 64,839 bytes of payload), so one gathered read is
// one TUN write and about one client ACK; 64 KiB would go as two
// segments. It matters where a flow fills 32 KiB before the wait passes,
// as on a long path, where the driver stretches the wait: at 200 ms,
// four flows sharing 250 Mbit/s, the near edge's TUN writes fell from 27
// to 16-17 per MB (three interleaved rounds;
// docs/efficiency/gather-63k-ab.txt).
const (
	coalesceWait  = 8 * time.Millisecond
	coalesceBytes = 63 << 10
	streamingGap  = 2 * time.Millisecond
)
