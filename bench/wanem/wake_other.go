//go:build !linux

package wanem

// waker wakes a releaser that waits for its pipe's first packet.
type waker struct{ c chan struct{} }

func newWaker() (*waker, error) { return &waker{c: make(chan struct{}, 1)}, nil }

// wait blocks until signal was called (since the last wait).
func (w *waker) wait() { <-w.c }

func (w *waker) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *waker) close() {}
