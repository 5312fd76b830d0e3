//go:build linux && !bindfallback

package bind

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/leaktest"
)

// TestGROSplitAcrossCalls sends one batch that GSO sends as two
// super-datagrams (51 datagrams, the last shorter, then 13 more) and
// reads them through a caller batch of 7: the datagrams that do not fit
// wait in the ring for the next ReadBatch, in order, without a system
// call per ReadBatch.
func TestGROSplitAcrossCalls(t *testing.T) {
	leaktest.Check(t)
	a := listen(t, "udp4", "127.0.0.1:0", Options{})
	b := listen(t, "udp4", "127.0.0.1:0", Options{})
	if !a.Stats().GSO || !b.Stats().GRO {
		t.Skipf("kernel lacks UDP GSO or GRO: %+v %+v", a.Stats(), b.Stats())
	}
	watchdog(t, 10*time.Second, a, b)

	var sizes []int
	for i := range 64 {
		switch {
		case i == 50:
			sizes = append(sizes, 300)
		case i > 50:
			sizes = append(sizes, 700)
		default:
			sizes = append(sizes, 1000)
		}
	}
	bufs, _, _ := buffers(7, 1500)
	calls := sendReceive(t, a, b, sizes, bufs)
	if s := a.Stats(); s.Segmented != 2 || s.WriteSyscalls != 1 {
		t.Fatalf("sender: %d GSO messages in %d system calls, want 2 in 1", s.Segmented, s.WriteSyscalls)
	}
	s := b.Stats()
	t.Logf("%d ReadBatch calls, receiver %+v", calls, s)
	if s.Coalesced != 2 {
		t.Errorf("received %d GRO super-datagrams, want 2", s.Coalesced)
	}
	if s.ReadSyscalls >= uint64(calls) {
		t.Errorf("%d system calls for %d ReadBatch calls: remainder not served from the ring", s.ReadSyscalls, calls)
	}
}

// TestGSOFallback makes the kernel refuse GSO sends (it does when UDP
// checksums are off: SO_NO_CHECK) and checks that WriteBatch turns GSO
// off, resends without it, and loses nothing.
func TestGSOFallback(t *testing.T) {
	leaktest.Check(t)
	warns := &warnCounter{}
	log := slog.New(warns)
	a := listen(t, "udp4", "127.0.0.1:0", Options{DisableGRO: true, Logger: log})
	b := listen(t, "udp4", "127.0.0.1:0", Options{})
	if !a.Stats().GSO {
		t.Skip("kernel lacks UDP GSO")
	}
	watchdog(t, 10*time.Second, a, b)
	var serr error
	if serr = unix.SetsockoptInt(a.(*linuxConn).sock, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); serr != nil {
		t.Fatalf("set SO_NO_CHECK: %v", serr)
	}

	out := make([][]byte, 0, 20)
	for i := range 20 {
		size := 1200
		if i < 2 {
			size = 100 + 100*i // two single datagrams before the first GSO run
		}
		out = append(out, make([]byte, size))
		fill(out[i], uint32(i))
	}
	for round := range 2 {
		if err := a.WriteBatch(out, b.LocalAddr()); err != nil {
			t.Fatalf("round %d: WriteBatch: %v", round, err)
		}
		bufs, sizes, eps := buffers(64, 1500)
		for next := 0; next < len(out); {
			n, err := b.ReadBatch(bufs, sizes, eps)
			if err != nil {
				t.Fatalf("round %d, after %d datagrams: %v", round, next, err)
			}
			for i := range n {
				if seq, err := verify(bufs[i][:sizes[i]]); err != nil || int(seq) != next {
					t.Fatalf("round %d, datagram %d: seq %d, %v", round, next, seq, err)
				}
				next++
			}
		}
	}
	s := a.Stats()
	if s.GSO || s.Segmented != 0 || s.DatagramsWritten != 40 {
		t.Errorf("after fallback: GSO %v, %d GSO messages, %d datagrams written; want false, 0, 40", s.GSO, s.Segmented, s.DatagramsWritten)
	}
	if n := warns.n.Load(); n != 1 {
		t.Errorf("%d warnings for the fallback, want one (not one per send)", n)
	}
}

// warnCounter is a slog.Handler counting records at Warn and above.
type warnCounter struct{ n atomic.Int32 }

func (h *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnCounter) WithGroup(string) slog.Handler      { return h }

// TestGSOErrorSurfaces checks that an error GSO cannot explain (sending
// to the broadcast address without SO_BROADCAST, which Go's net package
// sets, so the test clears it) is returned, wrapped with
// the errno, that a datagram too large for UDP is counted as too big and
// dropped without failing the batch, and that GSO stays on after both.
func TestGSOErrorSurfaces(t *testing.T) {
	leaktest.Check(t)
	a := listen(t, "udp4", "127.0.0.1:0", Options{})
	var serr error
	if serr = unix.SetsockoptInt(a.(*linuxConn).sock, unix.SOL_SOCKET, unix.SO_BROADCAST, 0); serr != nil {
		t.Fatalf("clear SO_BROADCAST: %v", serr)
	}
	err := a.WriteBatch([][]byte{make([]byte, 100), make([]byte, 100)}, netip.MustParseAddrPort("255.255.255.255:9"))
	if !errors.Is(err, unix.EACCES) {
		t.Fatalf("WriteBatch to the broadcast address: %v, want EACCES", err)
	}
	t.Logf("error: %v", err)
	if err := a.WriteBatch([][]byte{make([]byte, 70000)}, a.LocalAddr()); err != nil {
		t.Fatalf("WriteBatch of 70000 bytes: %v, want it dropped as too big without an error", err)
	}
	if s := a.Stats(); s.TooBig != 1 || s.DatagramsWritten != 0 {
		t.Errorf("after a 70000-byte datagram: %d too big, %d written; want 1, 0", s.TooBig, s.DatagramsWritten)
	}
	if !a.Stats().GSO {
		t.Error("GSO turned off by an error unrelated to it")
	}
}

// TestGRODirect checks the receive straight into the caller's buffers on
// a socket with GRO: datagrams that were not coalesced are returned
// without a copy from the ring; a super-datagram among them moves the
// rest of that receive to the ring without changing their order, and the
// receives after it go to the ring alone until one brings no
// super-datagram.
func TestGRODirect(t *testing.T) {
	// Seven messages: 600 and 700 alone, five of 800 coalesced, 900
	// alone, four of 1000 coalesced, 1100 and 1200 alone (a run of GSO
	// ends at a larger datagram, see gsoRun).
	mixed := []int{600, 700, 800, 800, 800, 800, 800, 900, 1000, 1000, 1000, 1000, 1100, 1200}
	singles := []int{500, 600, 700, 800, 900, 1000, 1100, 1200, 1300, 1400}
	for _, tc := range []struct {
		name      string
		gso       bool
		batch     int
		direct    uint64 // datagrams returned without a copy
		coalesced uint64
		syscalls  uint64
	}{
		{"uncoalesced/batch64", false, 64, 14, 0, 1},
		{"uncoalesced/batch3", false, 3, 14, 0, 5},
		// 600 and 700 directly, then the rest from the ring: the
		// receive that found 800 × 5 took all seven messages.
		{"mixed/batch64", true, 64, 2, 2, 1},
		// One per call: 600 and 700 directly, then 800 × 5 from the
		// ring; the next receive goes to the ring alone and takes the
		// last four messages at once.
		{"mixed/batch1", true, 1, 2, 2, 4},
		{"mixed/batch3", true, 3, 2, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			a := listen(t, "udp4", "127.0.0.1:0", Options{DisableGSO: !tc.gso})
			b := listen(t, "udp4", "127.0.0.1:0", Options{})
			if (tc.gso && !a.Stats().GSO) || !b.Stats().GRO {
				t.Skipf("kernel lacks UDP GSO or GRO: %+v %+v", a.Stats(), b.Stats())
			}
			watchdog(t, 10*time.Second, a, b)
			bufs, _, _ := buffers(tc.batch, 1500)
			sendReceive(t, a, b, mixed, bufs)
			s := b.Stats()
			if got := b.(*linuxConn).rx.direct; got != tc.direct {
				t.Errorf("%d datagrams returned without a copy, want %d", got, tc.direct)
			}
			if s.Coalesced != tc.coalesced || s.DatagramsRead != uint64(len(mixed)) || s.Dropped != 0 {
				t.Errorf("receiver %+v: want %d coalesced, %d read, none dropped", s, tc.coalesced, len(mixed))
			}
			if s.ReadSyscalls != tc.syscalls {
				t.Errorf("%d system calls, want %d", s.ReadSyscalls, tc.syscalls)
			}
			if !tc.gso {
				return
			}
			// Datagrams alone again: the first receive is the ring's, and
			// finds no super-datagram; the next is direct.
			c := listen(t, "udp4", "127.0.0.1:0", Options{DisableGSO: true})
			watchdog(t, 10*time.Second, c)
			bufs, _, _ = buffers(64, 1500)
			d0 := b.(*linuxConn).rx.direct
			sendReceive(t, c, b, singles, bufs)
			if got := b.(*linuxConn).rx.direct - d0; got != 0 {
				t.Errorf("%d datagrams returned directly after a super-datagram, want 0", got)
			}
			sendReceive(t, c, b, singles, bufs)
			if got := b.(*linuxConn).rx.direct - d0; got != uint64(len(singles)) {
				t.Errorf("%d datagrams returned directly once no super-datagram came, want %d", got, len(singles))
			}
		})
	}
}

// sendReceive sends datagrams of sizes from a to b in one WriteBatch and
// reads them all through bufs, checking their content, order and sender;
// it returns the number of ReadBatch calls.
func sendReceive(t *testing.T, a, b Conn, sizes []int, bufs [][]byte) (calls int) {
	t.Helper()
	out := make([][]byte, len(sizes))
	for i, size := range sizes {
		out[i] = make([]byte, size)
		fill(out[i], uint32(i))
	}
	if err := a.WriteBatch(out, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	got, eps := make([]int, len(bufs)), make([]Endpoint, len(bufs))
	for next := 0; next < len(out); {
		n, err := b.ReadBatch(bufs, got, eps)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", next, err)
		}
		calls++
		if n > len(bufs) {
			t.Fatalf("ReadBatch returned %d datagrams into %d buffers", n, len(bufs))
		}
		for i := range n {
			seq, err := verify(bufs[i][:got[i]])
			if err != nil {
				t.Fatal(err)
			}
			if int(seq) != next || got[i] != len(out[seq]) || eps[i] != a.LocalAddr() {
				t.Fatalf("datagram %d: got seq %d, %d bytes from %v", next, seq, got[i], eps[i])
			}
			next++
		}
	}
	return calls
}
