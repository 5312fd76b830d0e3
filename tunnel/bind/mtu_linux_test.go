//go:build linux && !bindfallback

package bind

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenSmallMTU returns two Conns on the loopback device of a new network
// namespace whose MTU is mtu (root only; the namespace goes away with its
// sockets). The goroutine that made them keeps its OS thread in the
// namespace and exits locked, so the thread dies with it.
func listenSmallMTU(t *testing.T, network, addr string, mtu int) (Conn, Conn) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace with a small-MTU loopback")
	}
	type result struct {
		a, b Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays in the namespace and exits
		r := result{}
		defer func() { ch <- r }()
		if r.err = unix.Unshare(unix.CLONE_NEWNET); r.err != nil {
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if r.err = err; err != nil {
			return
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if r.err = err; err != nil {
			return
		}
		ifr.SetUint32(uint32(mtu))
		if r.err = unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); r.err != nil {
			return
		}
		ifr.SetUint16(unix.IFF_UP)
		if r.err = unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); r.err != nil {
			return
		}
		a, b := listen(t, network, addr, Options{}), listen(t, network, addr, Options{})
		r.a, r.b = a, b
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("set up a namespace with loopback MTU %d: %v", mtu, r.err)
	}
	return r.a, r.b
}

// TestDontFragment: on a path whose device MTU is 1280, a datagram whose
// IP packet would exceed it is refused by the kernel (DF, never
// fragmented), counted as too big and dropped, and the rest of the batch,
// GSO runs included, arrives; GSO stays on. One batch mixes a too-big
// datagram into a GSO run, as a path MTU probe among data packets does.
func TestDontFragment(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{{"udp4", "127.0.0.1:0"}, {"udp6", "[::1]:0"}} {
		t.Run(tc.network, func(t *testing.T) {
			a, b := listenSmallMTU(t, tc.network, tc.addr, 1280)
			defer a.Close()
			defer b.Close()
			watchdog(t, 10*time.Second, a, b)
			if !a.Stats().DontFragment {
				t.Fatal("Stats.DontFragment false: IP(V6)_MTU_DISCOVER not set")
			}
			gso := a.Stats().GSO
			const fits, tooBig = 1200, 1300
			sizes := []int{fits, fits, fits, tooBig, fits, fits, fits}
			out := make([][]byte, len(sizes))
			for i, n := range sizes {
				out[i] = make([]byte, n)
				fill(out[i], uint32(i))
			}
			if err := a.WriteBatch(out, b.LocalAddr()); err != nil {
				t.Fatalf("WriteBatch: %v; want the too-big datagram dropped without an error", err)
			}
			bufs, rsizes, eps := buffers(64, 1500)
			var got []uint32
			for len(got) < len(sizes)-1 {
				n, err := b.ReadBatch(bufs, rsizes, eps)
				if err != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				for i := range n {
					seq, err := verify(bufs[i][:rsizes[i]])
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, seq)
				}
			}
			want := []uint32{0, 1, 2, 4, 5, 6}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("received %v, want %v", got, want)
				}
			}
			s := a.Stats()
			if s.TooBig != 1 || s.DatagramsWritten != 6 {
				t.Errorf("TooBig %d, DatagramsWritten %d; want 1, 6", s.TooBig, s.DatagramsWritten)
			}
			if s.GSO != gso {
				t.Errorf("GSO %v after a too-big datagram, was %v: a size error must not turn GSO off", s.GSO, gso)
			}
		})
	}
}
