//go:build linux && !bindfallback

package bind

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// epollReadable reports whether the oneshot's epoll instance has an event
// for Go's poller, that is, whether it would wake the process.
func epollReadable(t *testing.T, o *oneshot) bool {
	t.Helper()
	var ready bool
	if err := o.rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		if err != nil {
			t.Errorf("poll: %v", err)
		}
		ready = n > 0 && p[0].Revents&unix.POLLIN != 0
	}); err != nil {
		t.Fatal(err)
	}
	return ready
}

// TestOneshotQuietBetweenReads: datagrams that arrive while nobody reads
// (the driver's reader holding its next read) do not make the socket's
// epoll instance ready, so they wake nothing; a read that waits arms it
// again, and the next datagram wakes that read.
func TestOneshotQuietBetweenReads(t *testing.T) {
	a := listen(t, "udp4", "127.0.0.1:0", offloadOff)
	b := listen(t, "udp4", "127.0.0.1:0", offloadOff)
	watchdog(t, 10*time.Second, a, b)
	rxw := a.(*linuxConn).rxw
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
