package driver

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/monotime"
)

// TestReadGather: a gathering read returns once it holds min bytes, or
// its wait has passed since the first byte, or the stream ends; its bytes
// are never lost, whatever ends it.
func TestReadGather(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 21, nil)
	c, s := openAccepted(t, cli, srv)
	buf := make([]byte, 64<<10)

	// Several writes gathered into one read of at least min bytes (a 3 ms
	// gap on a loaded machine ends the gather early: the rest comes next).
	go func() {
		for i := range 8 {
			s.Write(bytes.Repeat([]byte{byte(i)}, 1000))
			time.Sleep(200 * time.Microsecond)
		}
	}()
	n, err := c.ReadGather(buf, 8000, 10*time.Second)
	if err != nil || n < 2000 {
		t.Fatalf("gather 8 x 1000 bytes: %d, %v; want more than one write's bytes", n, err)
	}
	for n < 8000 {
		k, err := c.ReadGather(buf[n:8000], 8000-n, 10*time.Second)
		if err != nil {
			t.Fatalf("the rest of 8 x 1000 bytes: %v", err)
		}
		n += k
	}
	for i := range 8 {
		if buf[i*1000] != byte(i) || buf[i*1000+999] != byte(i) {
			t.Fatalf("gathered bytes out of order at write %d", i)
		}
	}

	// Fewer bytes than min, and the stream falls quiet: the read ends once
	// nothing came for gatherQuietFor (3 ms here), not after its wait.
	s.Write([]byte("abc"))
	start := time.Now()
	n, err = c.ReadGather(buf, 8000, time.Hour)
	if el := time.Since(start); err != nil || string(buf[:n]) != "abc" || el < 2*time.Millisecond || el > 5*time.Second {
		t.Fatalf("gather of a stream that fell quiet: %q, %v after %v; want it after about 3 ms", buf[:n], err, el)
	}

	// Bytes after the read waited with nothing for longer than its wait
	// start a new burst: they are returned at once.
	wrote := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		wrote <- time.Now()
		s.Write([]byte("late"))
	}()
	n, err = c.ReadGather(buf, 8000, 200*time.Millisecond)
	if el := time.Since(<-wrote); err != nil || string(buf[:n]) != "late" || el > 150*time.Millisecond {
		t.Fatalf("gather after a pause: %q, %v %v after the write; want it at once, not after the 200 ms wait", buf[:n], err, el)
	}

	// A buffer smaller than min is satisfied once full.
	s.Write([]byte("full"))
	if n, err = c.ReadGather(buf[:4], 8000, time.Hour); err != nil || string(buf[:n]) != "full" {
		t.Fatalf("gather into a 4-byte buffer: %q, %v", buf[:n], err)
	}

	// The first byte is not held back by a plain Read.
	s.Write([]byte("x"))
	mustRead(t, c, []byte("x"))

	// The read deadline ends a gathering read with what it holds; the
	// next read goes on.
	s.Write([]byte("de"))
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	n, err = c.ReadGather(buf, 8000, time.Hour)
	if err != nil || string(buf[:n]) != "de" {
		t.Fatalf("gather ended by the deadline: %q, %v", buf[:n], err)
	}
	n, err = c.ReadGather(buf, 8000, time.Hour)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("gather past the deadline, nothing there: %d, %v", n, err)
	}
	c.SetReadDeadline(time.Time{})

	// The peer's FIN ends a gathering read: the bytes first, then io.EOF.
	s.Write([]byte("end"))
	s.CloseWrite()
	n, err = c.ReadGather(buf, 8000, time.Hour)
	if err != nil || string(buf[:n]) != "end" {
		t.Fatalf("gather before the FIN: %q, %v", buf[:n], err)
	}
	if n, err = c.ReadGather(buf, 8000, time.Hour); n != 0 || err != io.EOF {
		t.Fatalf("after the FIN: %d, %v; want io.EOF", n, err)
	}
	c.Close()
	s.Close()
}

// TestReadGatherClosed: Close and the tunnel's end wake a parked read.
func TestReadGatherClosed(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 22, nil)
	c1, s1 := openAccepted(t, cli, srv)
	c2, s2 := openAccepted(t, cli, srv)
	defer s1.Close()
	defer s2.Close()

	done := make(chan error, 1)
	go func() { _, err := c1.ReadGather(make([]byte, 100), 100, time.Hour); done <- err }()
	time.Sleep(20 * time.Millisecond)
	c1.Close()
	if err := <-done; !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("parked read after Close: %v, want ErrStreamClosed", err)
	}

	// The tunnel's end wakes a parked read.
	go func() { _, err := c2.ReadGather(make([]byte, 100), 100, time.Hour); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cli.Close()
	if err := <-done; !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("parked read at the tunnel's end: %v, want ErrTunnelClosed", err)
	}
	c2.Close()
}

// TestExpireParkedJoins: once a gathering read's wait has passed, the
// reads that have at most half their wait left are answered with it, and
// the rest wait on; no read is answered early while none has expired.
func TestExpireParkedJoins(t *testing.T) {
	const wait = 4 * time.Millisecond
	d := &driverState{parked: make(map[*Stream]struct{})}
	t0 := monotime.Time(1_000_000_000)
	park := func(until monotime.Time) chan result {
		s := &Stream{}
		reply := make(chan result, 1)
		s.d.park = parkedRead{active: true, gen: 1, buf: make([]byte, 100), n: 10, min: 100, wait: wait, until: until, last: until.Add(-wait), quiet: time.Hour, reply: reply}
		d.parked[s] = struct{}{}
		d.gatherq = append(d.gatherq, gatherWait{s: s, gen: 1})
		return reply
	}
	first := park(t0)
	near := park(t0.Add(wait / 2))     // half its wait left when the first expires
	far := park(t0.Add(wait/2 + 1000)) // a little more than half left
	answered := func(c chan result) bool {
		select {
		case r := <-c:
			if r.n != 10 || r.err != nil {
				t.Fatalf("answer %+v, want the 10 bytes it held", r)
			}
			return true
		default:
			return false
		}
	}

	// Just before the first expires, a read within half of its wait is
	// not answered early: nothing expired to wake for.
	if next := d.expireParked(t0.Add(-1)); next != t0 || answered(first) || answered(near) || answered(far) {
		t.Fatalf("before any wait passed: next %v (want %v), or a read answered", next, t0)
	}
	if next := d.expireParked(t0); next != t0.Add(wait/2+1000) {
		t.Fatalf("next expiry %v, want the far read's %v", next, t0.Add(wait/2+1000))
	}
	if !answered(first) || !answered(near) {
		t.Fatal("the expired read, or the one with half its wait left, was not answered")
	}
	if answered(far) {
		t.Fatal("a read with more than half its wait left was answered early")
	}
	if len(d.parked) != 1 {
		t.Fatalf("%d reads still parked, want 1", len(d.parked))
	}
}

// TestExpireParkedQuiet: a gathering read whose stream brought nothing for
// its quiet time is answered then, before its wait ends; one whose
// stream keeps bringing bytes is answered at its wait's end; the next
// deadline returned is the earliest of either kind.
func TestExpireParkedQuiet(t *testing.T) {
	const wait, quiet = 8 * time.Millisecond, 3 * time.Millisecond
	d := &driverState{parked: make(map[*Stream]struct{})}
	t0 := monotime.Time(1_000_000_000)
	park := func() (*Stream, chan result) {
		s := &Stream{}
		reply := make(chan result, 1)
		s.d.park = parkedRead{active: true, gen: 1, buf: make([]byte, 100), n: 10, min: 100, wait: wait, quiet: quiet, last: t0, until: t0.Add(wait), reply: reply}
		d.parked[s] = struct{}{}
		d.gatherq = append(d.gatherq, gatherWait{s: s, gen: 1})
		return s, reply
	}
	streaming, sr := park()
	_, qr := park()
	answered := func(c chan result) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	// Bytes keep coming for the streaming read, every millisecond.
	for ms := 1; ms < 3; ms++ {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		streaming.d.park.last = now
		if next := d.expireParked(now); next != t0.Add(quiet) || answered(sr) || answered(qr) {
			t.Fatalf("at %d ms: next %v, want the quiet read's %v; or a read answered early", ms, next, t0.Add(quiet))
		}
	}
	// At 3 ms the quiet read is answered; the streaming one waits on
	// (its quiet deadline is 5 ms, its wait's end 8 ms).
	if next := d.expireParked(t0.Add(quiet)); next != t0.Add(5*time.Millisecond) || !answered(qr) || answered(sr) {
		t.Fatalf("at 3 ms: next %v (want 5 ms), quiet read answered %v, streaming read answered %v", next, !answered(qr), answered(sr))
	}
	for ms := 3; ms < 8; ms++ {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		streaming.d.park.last = now
		d.expireParked(now)
		if answered(sr) {
			t.Fatalf("streaming read answered at %d ms, before its wait's end", ms)
		}
	}
	if next := d.expireParked(t0.Add(wait)); next != 0 || !answered(sr) || len(d.gatherq) != 0 || len(d.parked) != 0 {
		t.Fatalf("at the wait's end: next %v, %d armed, %d parked; want the streaming read answered and none left", next, len(d.gatherq), len(d.parked))
	}
}

// TestExpireParkedLate: past its wait's end a gathering read is answered
// whenever the driver wakes, but the driver need not wake for it until
// late after that end (the next read of the socket comes sooner while its
// flow streams), or its quiet deadline if that is sooner.
func TestExpireParkedLate(t *testing.T) {
	const wait, quiet, late = 8 * time.Millisecond, 6 * time.Millisecond, 3 * time.Millisecond
	d := &driverState{parked: make(map[*Stream]struct{})}
	t0 := monotime.Time(1_000_000_000)
	s := &Stream{}
	reply := make(chan result, 1)
	s.d.park = parkedRead{active: true, gen: 1, buf: make([]byte, 100), n: 10, min: 100, wait: wait, quiet: quiet, late: late, last: t0, until: t0.Add(wait), reply: reply}
	d.parked[s] = struct{}{}
	d.gatherq = append(d.gatherq, gatherWait{s: s, gen: 1})
	answered := func() bool {
		select {
		case <-reply:
			return true
		default:
			return false
		}
	}
	// Bytes every 3 ms: the quiet deadline (last + 6 ms) stays ahead, and
	// the driver is asked to wake by then or at the wait's end + late.
	for _, ms := range []int{3, 6} {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		s.d.park.last = now
		want := min(now.Add(quiet), t0.Add(wait+late))
		if next := d.expireParked(now); next != want || answered() {
			t.Fatalf("at %d ms: next %v (want %v), or answered before its wait's end", ms, next, want)
		}
	}
	// The next batch, 1 ms past the wait's end, answers it.
	s.d.park.last = t0.Add(9 * time.Millisecond)
	if next := d.expireParked(t0.Add(9 * time.Millisecond)); next != 0 || !answered() || len(d.parked) != 0 {
		t.Fatalf("1 ms past its wait's end: next %v, answered %v, %d parked; want it answered", next, !answered(), len(d.parked))
	}
}

// TestExpireParkedCountsGathering: expireParked notes how many gathering
// reads were armed when it ran (those it answers included, an answered
// one left in the queue not), and the most over the last
// gatherPeakWindow stretches the waits of the reads parked after it
// (gatherWaitShared).
func TestExpireParkedCountsGathering(t *testing.T) {
	const wait = 8 * time.Millisecond
	d := &driverState{parked: make(map[*Stream]struct{})}
	t0 := monotime.Time(1_000_000_000)
	var streams []*Stream
	for i := range 6 {
		s := &Stream{}
		s.d.park = parkedRead{active: true, gen: 1, buf: make([]byte, 100), n: 10, min: 100, wait: wait, quiet: time.Hour, last: t0, until: t0.Add(wait + time.Duration(i)), reply: make(chan result, 1)}
		d.parked[s] = struct{}{}
		d.gatherq = append(d.gatherq, gatherWait{s: s, gen: 1})
		streams = append(streams, s)
	}
	d.unpark(streams[5], result{n: 10}) // answered, still in the queue
	if d.expireParked(t0); d.gathering.peak != 5 {
		t.Fatalf("five reads armed, none due: gathering %d, want 5", d.gathering.peak)
	}
	if d.expireParked(t0.Add(2 * wait)); d.gathering.peak != 5 || len(d.parked) != 0 {
		t.Fatalf("all five due: gathering %d (want 5, counted before answering), %d still parked", d.gathering.peak, len(d.parked))
	}
	// None armed now, but five were within the window.
	if d.expireParked(t0.Add(3 * wait)); d.gathering.peak != 5 {
		t.Fatalf("none armed, five %v ago: gathering %d, want 5", wait, d.gathering.peak)
	}
	if d.expireParked(t0.Add(2*wait + gatherPeakWindow + 1)); d.gathering.peak != 0 {
		t.Fatalf("none armed for longer than the window: gathering %d, want 0", d.gathering.peak)
	}
}
