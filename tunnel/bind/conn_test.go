package bind

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
)

var (
	offloadOn  = Options{}
	offloadOff = Options{DisableGSO: true, DisableGRO: true}
)

// bothOffloads runs f as a subtest with the offloads on and with them off,
// each checked for leaked goroutines.
func bothOffloads(t *testing.T, f func(t *testing.T, opts Options)) {
	for _, tc := range []struct {
		name string
		opts Options
	}{{"offload", offloadOn}, {"plain", offloadOff}} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			f(t, tc.opts)
		})
	}
}

// TestEcho sends 10,000 datagrams of mixed sizes through an echoing Conn
// and checks that each comes back intact and in order, with the offloads
// on (where the kernel has them) and off, over IPv4 and IPv6.
func TestEcho(t *testing.T) {
	for _, tc := range []struct {
		name, network, addr string
		opts                Options
	}{
		{"v4/offload", "udp4", "127.0.0.1:0", offloadOn},
		{"v4/plain", "udp4", "127.0.0.1:0", offloadOff},
		{"v6/offload", "udp6", "[::1]:0", offloadOn},
		{"v6/plain", "udp6", "[::1]:0", offloadOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Check(t)
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			a := listen(t, tc.network, tc.addr, tc.opts)
			b := listen(t, tc.network, tc.addr, tc.opts)
			watchdog(t, 20*time.Second, a, b)
			errc := make(chan error, 16)
			go echo(b, errc)
			defer func() {
				b.Close()
				for err := range errc {
					t.Errorf("echo: %v", err)
				}
			}()

			const count = 10_000
			sizes := mixedSizes(rand.New(rand.NewPCG(seed, 0)), count)
			window := a.BatchSize()
			out := make([][]byte, window)
			for i := range out {
				out[i] = make([]byte, 1472)
			}
			in, inSizes, inEps := buffers(window, 1500)
			next := uint32(0)
			for sent := 0; sent < count; {
				w := min(window, count-sent)
				for i := range w {
					out[i] = out[i][:sizes[sent+i]]
					fill(out[i], uint32(sent+i))
				}
				if err := a.WriteBatch(out[:w], b.LocalAddr()); err != nil {
					t.Fatalf("WriteBatch: %v", err)
				}
				sent += w
				for int(next) < sent {
					n, err := a.ReadBatch(in, inSizes, inEps)
					if err != nil {
						t.Fatalf("ReadBatch after %d of %d echoes: %v (a %+v, b %+v)", next, count, err, a.Stats(), b.Stats())
					}
					for i := range n {
						seq, err := verify(in[i][:inSizes[i]])
						if err != nil {
							t.Fatalf("echo %d: %v", next, err)
						}
						if seq != next {
							t.Fatalf("echo %d has sequence number %d: reordered or lost", next, seq)
						}
						if inSizes[i] != sizes[seq] {
							t.Fatalf("echo %d: %d bytes, sent %d", seq, inSizes[i], sizes[seq])
						}
						if inEps[i] != b.LocalAddr() {
							t.Fatalf("echo %d from %v, want %v", seq, inEps[i], b.LocalAddr())
						}
						next++
					}
				}
			}
			sa, sb := a.Stats(), b.Stats()
			t.Logf("a: %+v", sa)
			t.Logf("b: %+v", sb)
			if sa.DatagramsWritten != count || sa.DatagramsRead != count || sb.DatagramsRead != count {
				t.Errorf("counters: a wrote %d read %d, b read %d; want %d each", sa.DatagramsWritten, sa.DatagramsRead, sb.DatagramsRead, count)
			}
			if sa.Dropped+sb.Dropped != 0 {
				t.Errorf("dropped %d+%d datagrams, want none", sa.Dropped, sb.Dropped)
			}
			if windows := uint64((count + window - 1) / window); sa.WriteSyscalls > 2*windows {
				t.Errorf("a made %d send system calls for %d batches", sa.WriteSyscalls, windows)
			}
			if tc.opts.DisableGSO {
				if sa.GSO || sa.GRO || sa.Segmented != 0 || sb.Coalesced != 0 {
					t.Errorf("offloads used though disabled: a %+v, b %+v", sa, sb)
				}
			} else if sa.GSO && sb.GRO && (sa.Segmented == 0 || sb.Coalesced == 0) {
				t.Errorf("GSO and GRO on, but a sent %d GSO messages and b received %d GRO ones", sa.Segmented, sb.Coalesced)
			}
		})
	}
}

// TestAddresses checks that sources and destinations round-trip as plain
// IPv4 or IPv6 endpoints, including through a dual-stack socket, and that
// unreachable families are refused.
func TestAddresses(t *testing.T) {
	leaktest.Check(t)
	v4 := listen(t, "udp4", "127.0.0.1:0", Options{})
	v4b := listen(t, "udp4", "127.0.0.1:0", Options{})
	v6 := listen(t, "udp6", "[::1]:0", Options{})
	v6b := listen(t, "udp6", "[::1]:0", Options{})
	dual, err := Listen("udp", netip.AddrPort{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dual.Close() })
	watchdog(t, 10*time.Second, v4, v4b, v6, v6b, dual)
	if a := dual.LocalAddr().Addr(); !a.Is6() || !a.IsUnspecified() {
		t.Fatalf("dual-stack socket bound to %v, want [::]", dual.LocalAddr())
	}
	port := func(c Conn, a string) Endpoint {
		return netip.AddrPortFrom(netip.MustParseAddr(a), c.LocalAddr().Port())
	}

	for _, tc := range []struct {
		name     string
		from, to Conn
		dest     Endpoint
		wantSrc  Endpoint
	}{
		{"v4", v4, v4b, v4b.LocalAddr(), v4.LocalAddr()},
		{"v6", v6, v6b, v6b.LocalAddr(), v6.LocalAddr()},
		{"v4-mapped destination", v4, v4b, port(v4b, "::ffff:127.0.0.1"), v4.LocalAddr()},
		{"v4 to dual-stack", v4, dual, port(dual, "127.0.0.1"), v4.LocalAddr()},
		{"dual-stack to v4", dual, v4, v4.LocalAddr(), port(dual, "127.0.0.1")},
		{"v6 to dual-stack", v6, dual, port(dual, "::1"), v6.LocalAddr()},
		{"dual-stack to v6", dual, v6, v6.LocalAddr(), port(dual, "::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.from.WriteBatch([][]byte{[]byte(tc.name)}, tc.dest); err != nil {
				t.Fatalf("WriteBatch to %v: %v", tc.dest, err)
			}
			bufs, sizes, eps := buffers(4, 1500)
			n, err := tc.to.ReadBatch(bufs, sizes, eps)
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 || string(bufs[0][:sizes[0]]) != tc.name {
				t.Fatalf("got %d datagrams, first %q", n, bufs[0][:sizes[0]])
			}
			if eps[0] != tc.wantSrc {
				t.Errorf("source %v, want %v", eps[0], tc.wantSrc)
			}
		})
	}

	for _, tc := range []struct {
		name string
		from Conn
		dest Endpoint
	}{
		{"v6 from v4 socket", v4, v6.LocalAddr()},
		{"v4 from v6-only socket", v6, v4.LocalAddr()},
		{"invalid", v4, Endpoint{}},
	} {
		err := tc.from.WriteBatch([][]byte{{1}}, tc.dest)
		if !errors.Is(err, ErrAddressFamily) {
			t.Errorf("%s: WriteBatch to %v: %v, want ErrAddressFamily", tc.name, tc.dest, err)
		}
	}
}

// TestClose checks that Close wakes a blocked ReadBatch with net.ErrClosed
// and that every later call fails the same way.
func TestClose(t *testing.T) {
	bothOffloads(t, func(t *testing.T, opts Options) {
		c, err := Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), opts)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			bufs, sizes, eps := buffers(c.BatchSize(), 1500)
			_, err := c.ReadBatch(bufs, sizes, eps)
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond) // let it block; the outcome is the same if not
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("blocked ReadBatch returned %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake ReadBatch")
		}
		bufs, sizes, eps := buffers(1, 1500)
		if _, err := c.ReadBatch(bufs, sizes, eps); !errors.Is(err, net.ErrClosed) {
			t.Errorf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
		if err := c.WriteBatch(bufs, c.LocalAddr()); !errors.Is(err, net.ErrClosed) {
			t.Errorf("WriteBatch after Close: %v, want net.ErrClosed", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v, want nil", err)
		}
	})
}

// TestShortBuffers checks that a datagram longer than the caller's buffer
// is dropped and counted, and that its neighbours still arrive in order,
// also when GRO coalesced them and on empty datagrams.
func TestShortBuffers(t *testing.T) {
	if !fastPath {
		t.Skip("the portable Conn cannot detect truncation")
	}
	bothOffloads(t, func(t *testing.T, opts Options) {
		a := listen(t, "udp4", "127.0.0.1:0", opts)
		b := listen(t, "udp4", "127.0.0.1:0", opts)
		watchdog(t, 10*time.Second, a, b)
		var out [][]byte
		var want []int
		for i, size := range []int{900, 900, 900, 500, 0, 800, 800, 300, 1000, 0} {
			out = append(out, make([]byte, size))
			if size <= 800 {
				want = append(want, i)
			}
			if size > 0 {
				out[i][0] = byte(i)
			}
		}
		if err := a.WriteBatch(out, b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		bufs, sizes, eps := buffers(b.BatchSize(), 800)
		var got []int
		for len(got) < len(want) {
			n, err := b.ReadBatch(bufs, sizes, eps)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			for i := range n {
				if sizes[i] == 0 {
					got = append(got, -1)
					continue
				}
				got = append(got, int(bufs[i][0]))
			}
		}
		for i, w := range want {
			if len(out[w]) == 0 {
				want[i] = -1
			}
		}
		if !equal(got, want) {
			t.Errorf("received datagrams %v, want %v (-1: empty)", got, want)
		}
		if s := b.Stats(); s.Dropped != 4 {
			t.Errorf("Dropped = %d, want 4", s.Dropped)
		}
	})
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestListenErrors(t *testing.T) {
	for _, tc := range []struct {
		network string
		opts    Options
	}{
		{"tcp", Options{}},
		{"udp4", Options{BatchSize: -1}},
		{"udp4", Options{BatchSize: MaxBatchSize + 1}},
	} {
		c, err := Listen(tc.network, netip.MustParseAddrPort("127.0.0.1:0"), tc.opts)
		if err == nil {
			c.Close()
			t.Errorf("Listen(%q, %+v) succeeded, want an error", tc.network, tc.opts)
		} else {
			t.Logf("Listen(%q, %+v): %v", tc.network, tc.opts, err)
		}
	}
}
