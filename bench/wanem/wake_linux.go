package wanem

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// waker wakes a releaser that waits for its pipe's first packet: an
// eventfd the releaser's locked thread blocks on and the reader writes,
// one thread woken by the kernel. Through a channel the wake went through
// Go's scheduler, which queues the releaser's goroutine where the reader
// runs and wakes another thread to hand it to the releaser's own: two
// wake-ups, each of a real-time thread in the lab (which takes whatever
// CPU it lands on). Signals add up until the next wait takes them all.
type waker struct {
	fd  int
	buf [8]byte
}

func newWaker() (*waker, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("wanem: eventfd for the releaser's wake-up: %w", err)
	}
	return &waker{fd: fd}, nil
}

// wait blocks until signal was called (since the last wait).
func (w *waker) wait() {
	for {
		if _, err := unix.Read(w.fd, w.buf[:]); err != unix.EINTR {
			return
		}
	}
}

func (w *waker) signal() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1) // an eventfd counts in the host's byte order
	_, _ = unix.Write(w.fd, one[:])          // blocks only past 2^64-2 signals without a wait
}

func (w *waker) close() { unix.Close(w.fd) }
