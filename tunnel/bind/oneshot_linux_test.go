//go:build linux && !bindfallback

package bind

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/fdtest"
)

// epollReadable reports whether the oneshot's epoll instance has an event
// for Go's poller, that is, whether it would wake the process.
func epollReadable(t *testing.T, o *oneshot) bool {
	t.Helper()
	return fdtest.Readable(t, o.rc)
}

// readAsync runs one ReadBatch of c on a goroutine of its own and
// sends the datagrams it returned.
func readAsync(t *testing.T, c Conn, bufs [][]byte, sizes []int, eps []Endpoint) <-chan int {
	got := make(chan int, 1)
	go func() {
		n, err := c.ReadBatch(bufs, sizes, eps)
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	return got
}

// oneshotPair returns two sockets on loopback, closed at the test's end
// or after 10 s, and a's receive waiter.
func oneshotPair(t *testing.T) (a, b Conn, rxw *oneshot) {
	a = listen(t, "udp4", "127.0.0.1:0", offloadOff)
	b = listen(t, "udp4", "127.0.0.1:0", offloadOff)
	watchdog(t, 10*time.Second, a, b)
	return a, b, a.(*linuxConn).rxw
}

// TestOneshotQuietBetweenReads: datagrams that arrive while nobody reads
// (the driver's reader holding its next read) do not make the socket's
// epoll instance ready, so they wake nothing; a read that waits arms it
// again, and the next datagram wakes that read.
func TestOneshotQuietBetweenReads(t *testing.T) {
	a, b, rxw := oneshotPair(t)
	bufs, sizes, eps := buffers(a.BatchSize(), 1500)
	one := [][]byte{make([]byte, 100)}

	got := make(chan int, 1)
	read := func() {
		n, err := a.ReadBatch(bufs, sizes, eps)
		if err != nil {
			t.Error(err)
		}
		got <- n
	}
	go read()
	time.Sleep(20 * time.Millisecond) // let it wait; the outcome is the same if not
	if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1 {
		t.Fatalf("first read: %d datagrams, want 1", n)
	}

	for range 5 {
		if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if epollReadable(t, rxw) {
		t.Fatal("datagrams that arrived with no read waiting made the epoll instance ready (they would wake the process)")
	}
	read() // takes the five without waiting
	if n := <-got; n != 5 {
		t.Fatalf("second read: %d datagrams, want 5", n)
	}

	go read()
	time.Sleep(20 * time.Millisecond)
	if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 1 {
			t.Fatalf("third read: %d datagrams, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting read was not woken by a datagram")
	}
}

// TestOneshotOneWait: a read that waits for its datagram asks the epoll
// instance once, when Go's poller wakes it, not also right after arming.
func TestOneshotOneWait(t *testing.T) {
	a, b, rxw := oneshotPair(t)
	bufs, sizes, eps := buffers(a.BatchSize(), 1500)
	for i := range 3 {
		got := readAsync(t, a, bufs, sizes, eps)
		time.Sleep(20 * time.Millisecond) // let it wait
		if err := b.WriteBatch([][]byte{make([]byte, 100)}, a.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		if n := <-got; n != 1 {
			t.Fatalf("read %d: %d datagrams, want 1", i, n)
		}
	}
	if rxw.pwaits != 3 {
		t.Fatalf("%d epoll_pwait calls for 3 reads that waited, want 3", rxw.pwaits)
	}
}

// TestOneshotReadyWhenArmed: a datagram that came between the read that
// found the socket empty and the arming still wakes the wait, which
// parks in Go's poller right after arming without asking the instance.
func TestOneshotReadyWhenArmed(t *testing.T) {
	a, b, rxw := oneshotPair(t)
	if err := b.WriteBatch([][]byte{make([]byte, 100)}, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the datagram is in the socket before the wait arms
	done := make(chan error, 1)
	go func() {
		rxw.armed, rxw.errno = false, 0 // as oneshot.do does after EAGAIN
		done <- rxw.rc.Read(rxw.waitFn)
	}()
	select {
	case err := <-done:
		if err != nil || rxw.errno != 0 {
			t.Fatalf("wait: %v, errno %v", err, rxw.errno)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a socket readable when armed did not wake the wait")
	}
}

// TestOnReadWait: ReadBatch tells its caller each time it finds the
// socket empty and is about to wait (WaitNotifier), and not when a
// datagram is already there.
func TestOnReadWait(t *testing.T) {
	a, b, _ := oneshotPair(t)
	bufs, sizes, eps := buffers(a.BatchSize(), 1500)
	one := [][]byte{make([]byte, 100)}
	waits := make(chan struct{}, 4)
	a.(WaitNotifier).OnReadWait(func() { waits <- struct{}{} })

	// On loopback the datagram is queued by the time WriteBatch returns.
	if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if n, err := a.ReadBatch(bufs, sizes, eps); n != 1 || err != nil {
		t.Fatalf("read of a queued datagram: %d, %v", n, err)
	}
	if len(waits) != 0 {
		t.Fatal("ReadBatch said it waits, with a datagram queued")
	}

	got := readAsync(t, a, bufs, sizes, eps)
	select {
	case <-waits:
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBatch on an empty socket did not say it waits")
	}
	select {
	case n := <-got:
		t.Fatalf("ReadBatch returned %d before any datagram came", n)
	default:
	}
	if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1 {
		t.Fatalf("the waiting read returned %d datagrams, want 1", n)
	}
	if len(waits) != 0 {
		t.Fatalf("%d more waits reported for one wait", len(waits))
	}
}

// TestWaitRead: after a read that emptied the socket, WaitRead waits for
// the next datagram (saying so to OnReadWait), and the read after it
// takes it in one recvmmsg, where ReadBatch alone would have made a
// second, told EAGAIN. After a full read, which may have left datagrams
// behind, it does not wait.
func TestWaitRead(t *testing.T) {
	a, b, _ := oneshotPair(t)
	bufs, sizes, eps := buffers(a.BatchSize(), 1500)
	one := [][]byte{make([]byte, 100)}
	waits := make(chan struct{}, 4)
	a.(WaitNotifier).OnReadWait(func() { waits <- struct{}{} })
	w := a.(ReadWaiter)

	three := [][]byte{make([]byte, 100), make([]byte, 100), make([]byte, 100)}
	if err := b.WriteBatch(three, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if n, err := a.ReadBatch(bufs, sizes, eps); n != 3 || err != nil {
		t.Fatalf("read of three queued datagrams: %d, %v", n, err)
	}
	calls0 := a.Stats().ReadSyscalls
	done := make(chan error, 1)
	go func() { done <- w.WaitRead() }()
	select {
	case <-waits:
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRead after a read that emptied the socket did not say it waits")
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitRead returned (%v) before any datagram came", err)
	default:
	}
	if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := a.ReadBatch(bufs, sizes, eps); n != 1 || err != nil {
		t.Fatalf("read after the wait: %d, %v", n, err)
	}
	if calls := a.Stats().ReadSyscalls - calls0; calls != 1 {
		t.Fatalf("%d recvmmsg calls for the read after the wait, want 1", calls)
	}
	if len(waits) != 0 {
		t.Fatal("the read after the wait waited again")
	}

	// A full read: WaitRead returns at once, although nothing is left.
	full := make([][]byte, a.BatchSize())
	for i := range full {
		full[i] = make([]byte, 100)
	}
	if err := b.WriteBatch(full, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, err := a.ReadBatch(bufs, sizes, eps); n != len(full) || err != nil {
		t.Fatalf("full read: %d of %d, %v", n, len(full), err)
	}
	go func() { done <- w.WaitRead() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRead after a full read waited")
	}

	// A waiting WaitRead ends with an error when the socket is closed.
	if err := b.WriteBatch(one, a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if n, err := a.ReadBatch(bufs, sizes, eps); n != 1 || err != nil {
		t.Fatalf("read: %d, %v", n, err)
	}
	go func() { done <- w.WaitRead() }()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("WaitRead on a closed socket returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake a waiting WaitRead")
	}
}
