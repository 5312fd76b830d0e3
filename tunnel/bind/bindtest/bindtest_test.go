package bindtest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel/bind"
)

func datagrams(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("datagram %d", i))
	}
	return out
}

func readAll(t *testing.T, c bind.Conn, want int) []string {
	t.Helper()
	bufs := make([][]byte, c.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 1500)
	}
	sizes, eps := make([]int, len(bufs)), make([]netip.AddrPort, len(bufs))
	var got []string
	for len(got) < want {
		n, err := c.ReadBatch(bufs, sizes, eps)
		if err != nil {
			t.Fatalf("ReadBatch after %d: %v", len(got), err)
		}
		if n > c.BatchSize() {
			t.Fatalf("ReadBatch returned %d, more than the batch size %d", n, c.BatchSize())
		}
		for i := range n {
			got = append(got, string(bufs[i][:sizes[i]]))
		}
	}
	return got
}

func TestPair(t *testing.T) {
	leaktest.Check(t)
	dropped := func(b []byte) bool { return len(b) > 0 && b[len(b)-1] == '3' }
	a, b := NewPair(Config{
		BatchSize: 8,
		Drop:      func(from, to netip.AddrPort, p []byte) bool { return dropped(p) },
	})
	defer a.Close()
	defer b.Close()

	out := datagrams(50)
	var want []string
	for _, d := range out {
		if !dropped(d) {
			want = append(want, string(d))
		}
	}
	for _, dir := range []struct {
		name     string
		from, to *Conn
	}{{"a to b", a, b}, {"b to a", b, a}} {
		if err := dir.from.WriteBatch(out, dir.to.LocalAddr()); err != nil {
			t.Fatalf("%s: %v", dir.name, err)
		}
		got := readAll(t, dir.to, len(want))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %q, want %q", dir.name, got, want)
		}
		if s := dir.from.Stats(); s.Dropped != uint64(len(out)-len(want)) || s.DatagramsWritten != uint64(len(want)) {
			t.Errorf("%s: writer stats %+v", dir.name, s)
		}
	}

	// To an address other than the peer's: discarded, like UDP to nowhere.
	if err := a.WriteBatch(out[:1], netip.MustParseAddrPort("127.0.0.1:9")); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteBatch(out[:1], netip.AddrPort{}); !errors.Is(err, bind.ErrAddressFamily) {
		t.Errorf("WriteBatch to the zero address: %v, want ErrAddressFamily", err)
	}
}

func TestPairClose(t *testing.T) {
	leaktest.Check(t)
	a, b := NewPair(Config{Queue: 2})
	defer a.Close()

	// A blocked reader wakes on Close.
	readErr := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(make([][]byte, 1), make([]int, 1), make([]netip.AddrPort, 1))
		readErr <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it block; the outcome is the same if not
	b.Close()
	if err := <-readErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked ReadBatch: %v, want net.ErrClosed", err)
	}
	// Writes to a closed peer are discarded, not blocked.
	if err := a.WriteBatch(datagrams(5), b.LocalAddr()); err != nil {
		t.Errorf("WriteBatch to a closed peer: %v", err)
	}

	// A writer blocked on a full queue wakes on its own Close.
	c, d := NewPair(Config{Queue: 2})
	defer d.Close()
	writeErr := make(chan error, 1)
	go func() { writeErr <- c.WriteBatch(datagrams(5), d.LocalAddr()) }()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	if err := <-writeErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked WriteBatch: %v, want net.ErrClosed", err)
	}
	if err := c.WriteBatch(datagrams(1), d.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteBatch after Close: %v, want net.ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
