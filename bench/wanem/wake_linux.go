package wanem

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// waker wakes a releaser waiting for its pipe's first packet with an eventfd
// its locked thread blocks on, one kernel wake-up where a channel costs two.
// Signals add up until the next wait takes them all.
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
