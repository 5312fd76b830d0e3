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

	// Several writes gathered into one read of at least min bytes.
	go func() {
		for i := range 8 {
			s.Write(bytes.Repeat([]byte{byte(i)}, 1000))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	n, err := c.ReadGather(buf, 8000, 10*time.Second)
	if err != nil || n != 8000 {
		t.Fatalf("gather 8 x 1000 bytes: %d, %v", n, err)
	}
	for i := range 8 {
		if buf[i*1000] != byte(i) || buf[i*1000+999] != byte(i) {
			t.Fatalf("gathered bytes out of order at write %d", i)
		}
	}

	// Fewer bytes than min: the wait, counted from the first byte, ends
	// the read with what came.
	s.Write([]byte("abc"))
	start := time.Now()
	n, err = c.ReadGather(buf, 8000, 30*time.Millisecond)
	if el := time.Since(start); err != nil || string(buf[:n]) != "abc" || el < 25*time.Millisecond || el > 5*time.Second {
		t.Fatalf("gather after its wait: %q, %v after %v", buf[:n], err, el)
	}

	// Bytes that come after the read waited with nothing for longer than
	// its wait start a new burst: they are returned at once, not held
	// for the wait (an answer on a keep-alive connection).
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
		s.d.park = parkedRead{active: true, gen: 1, buf: make([]byte, 100), n: 10, min: 100, wait: wait, until: until, reply: reply}
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
