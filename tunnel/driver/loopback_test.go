package driver

import (
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
)

// cpuTime returns the process's user and system CPU time (getrusage).
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopbackTransfer sends size bytes from the client to the server over
// real UDP on 127.0.0.1, checks SHA-256, and returns the elapsed time and
// the process CPU time spent (both tunnel ends and both applications).
func loopbackTransfer(t testing.TB, cli, srv *Tunnel, size int64, seed uint64) (elapsed, cpu time.Duration) {
	t.Helper()
	c, s := openAccepted(t, cli, srv)
	defer c.Close()
	defer s.Close()
	var (
		wg   sync.WaitGroup
		n    int64
		got  [32]byte
		rerr error
	)
	cpu0, start := cpuTime(t), time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, got, rerr = recvAll(s, 256<<10)
	}()
	sent, werr := sendPattern(c, seed, size, 256<<10)
	wg.Wait()
	elapsed, cpu = time.Since(start), cpuTime(t)-cpu0
	if werr != nil || rerr != nil {
		t.Fatalf("send: %v; receive: %v", werr, rerr)
	}
	if n != size || got != sent {
		t.Fatalf("received %d bytes (want %d), SHA-256 match %v", n, size, got == sent)
	}
	return elapsed, cpu
}

// loopbackSize is how many bytes a loopback run moves: 1 GB, 32 MB under
// -short, 256 MB under -race.
func loopbackSize() int64 {
	switch {
	case testing.Short():
		return 32 << 20
	case raceEnabled:
		return 256 << 20 // 1 GB under -race takes minutes on 2 shared cores
	}
	return 1 << 30
}

// TestLoopbackTransfer moves 1 GB (32 MB under -short, 256 MB under
// -race) over real loopback UDP with a SHA-256 check and logs throughput
// and CPU per GB.
func TestLoopbackTransfer(t *testing.T) {
	leaktest.Check(t)
	size := loopbackSize()
	cli, srv := udpPair(t, 11, nil)
	el, cpu := loopbackTransfer(t, cli, srv, size, 42)
	gb := float64(size) / 1e9
	st := cli.Stats()
	t.Logf("%d MB in %v: %.0f Mbit/s, %.2f CPU-s/GB (both ends; race=%v)",
		size>>20, el.Round(time.Millisecond), float64(size)*8/el.Seconds()/1e6, cpu.Seconds()/gb, raceEnabled)
	t.Logf("client: %d datagrams out in %d batches (%.1f/batch), %d timer wakeups, %d loops; lost %d, retransmitted %d B; bind %+v",
		st.DatagramsOut, st.TxBatches, float64(st.DatagramsOut)/float64(max(st.TxBatches, 1)),
		st.TimerWakeups, st.Loops, st.Tunnel.PacketsLost, st.Tunnel.StreamBytesRetransmitted, st.Bind)
	ss := srv.Stats()
	t.Logf("server: %d datagrams in, %d batches, reader dropped %d, bind dropped %d, %d MB straight into parked reads",
		ss.DatagramsIn, ss.RxBatches, ss.RxDropped, ss.Bind.Dropped, ss.Tunnel.StreamBytesReadInto>>20)
	// The client reads only ACKs, which are never held: after a read that
	// emptied the socket it waits first (bind.ReadWaiter).
	t.Logf("client: %d batches in, %d recvmmsg calls", st.RxBatches, st.Bind.ReadSyscalls)
	if _, ok := cli.bc.(bind.ReadWaiter); ok && st.Bind.ReadSyscalls > st.RxBatches*5/4+4 {
		t.Errorf("client made %d recvmmsg calls for %d batches of ACKs, want about one each", st.Bind.ReadSyscalls, st.RxBatches)
	}
}

// TestLoopbackPacing sends at a fixed 250 Mbit/s over loopback and
// checks that the driver keeps the rate although Go timers fire 1-2 ms
// late for sub-millisecond waits. It measures both wait modes.
func TestLoopbackPacing(t *testing.T) {
	if testing.Short() {
		t.Skip("timing measurement")
	}
	for _, timerOnly := range []bool{false, true} {
		name := "sleeper"
		if timerOnly {
			name = "timer-only"
		}
		t.Run(name, func(t *testing.T) {
			leaktest.Check(t)
			const rate = 250e6
			cli, srv := udpPair(t, 12, func(c, s *Config) {
				for _, cfg := range []*Config{c, s} {
					cfg.Tunnel.Congestion = tunnel.CCFixed
					cfg.Tunnel.FixedRateBps = rate
					cfg.TimerOnly = timerOnly
				}
			})
			size := int64(64 << 20)
			el, cpu := loopbackTransfer(t, cli, srv, size, 7)
			st := cli.Stats()
			wire := float64(st.Tunnel.BytesSent) * 8 / el.Seconds() // UDP payload rate
			t.Logf("fixed %.0f Mbit/s, %s: UDP payload %.1f Mbit/s (%.1f %%), stream data %.1f Mbit/s; %d timer + %d sleeper wakeups, %.1f datagrams/batch, %.2f CPU-s/GB",
				rate/1e6, name, wire/1e6, 100*wire/rate, float64(size)*8/el.Seconds()/1e6,
				st.TimerWakeups, st.SleepWakeups, float64(st.DatagramsOut)/float64(max(st.TxBatches, 1)),
				cpu.Seconds()/(float64(size)/1e9))
			if !timerOnly && havePreciseSleep && !raceEnabled && wire < 0.9*rate {
				t.Errorf("paced rate %.1f Mbit/s, want at least 90 %% of %.0f", wire/1e6, rate/1e6)
			}
		})
	}
}

// BenchmarkLoopbackThroughput measures one stream over real loopback UDP
// (both tunnel ends in this process), CPU seconds per GB and allocations
// per write. Each iteration moves 1 MiB.
func BenchmarkLoopbackThroughput(b *testing.B) {
	benchLoopback(b, func(c *Stream, buf []byte) error {
		_, err := c.Write(buf)
		return err
	})
}

// BenchmarkLoopbackLend is BenchmarkLoopbackThroughput with the sender
// filling room lent by Stream.Lend (as the far edge's relay reads its
// server's socket into it) instead of calling Write: the copy into the
// lent room stands for the socket read, so the figure compares with
// Write's, where the driver makes that copy. Each iteration moves 1 MiB.
func BenchmarkLoopbackLend(b *testing.B) {
	filled := 0
	benchLoopback(b, func(c *Stream, buf []byte) error {
		for len(buf) > 0 {
			room, err := c.Lend(filled, 64<<10)
			if err != nil {
				return err
			}
			filled = 0
			for _, r := range room {
				m := copy(r, buf)
				filled += m
				buf = buf[m:]
			}
		}
		if buf == nil { // the end: commit the last room
			_, err := c.Lend(filled, 0)
			return err
		}
		return nil
	})
}

// benchLoopback moves 1 MiB per iteration over one stream between two
// tunnels on loopback UDP with send, which is called once more with a nil
// buffer after the last iteration, and reports CPU-s/GB and the share of
// packets lost.
func benchLoopback(b *testing.B, send func(c *Stream, buf []byte) error) {
	cli, srv := udpPair(b, 13, nil)
	c, s := openAccepted(b, cli, srv)
	const chunk = 1 << 20
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{s}, make([]byte, 256<<10))
		done <- err
	}()
	buf := make([]byte, chunk)
	seed.ChaCha8(1).Read(buf)
	b.SetBytes(chunk)
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		if err := send(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := send(c, nil); err != nil {
		b.Fatal(err)
	}
	c.CloseWrite()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	b.ReportMetric(cpu.Seconds()/(float64(b.N)*chunk/1e9), "cpu-s/GB")
	st := cli.Stats()
	b.ReportMetric(float64(st.Tunnel.PacketsLost)/float64(max(st.Tunnel.PacketsSent, 1))*100, "%lost")
	c.Close()
	s.Close()
}

// TestLoopbackRekey is the rekey's real run: 1 GB (256 MB under -race)
// hash-checked over loopback UDP while the client rekeys every 300 ms.
// Both sides count the same rekeys, at least five, and the transfer keeps
// its pace (the figure is logged beside TestLoopbackTransfer's).
func TestLoopbackRekey(t *testing.T) {
	leaktest.Check(t)
	size := loopbackSize()
	cli, srv := udpPair(t, 13, func(c, s *Config) { c.Tunnel.RekeyAfter = 300 * time.Millisecond })
	el, _ := loopbackTransfer(t, cli, srv, size, 43)
	// The server counts a rekey after the client does, and the client keeps
	// rekeying: read the server first, or a rekey completing between the
	// two reads shows on the client's count only.
	ss := srv.Stats().Tunnel
	cs := cli.Stats().Tunnel
	t.Logf("%d MB in %v (%.0f Mbit/s) across %d rekeys (server %d)", size>>20, el.Round(time.Millisecond),
		float64(size)*8/el.Seconds()/1e6, cs.Rekeys, ss.Rekeys)
	if want := uint64(5); !testing.Short() && cs.Rekeys < want {
		t.Errorf("%d rekeys; want at least %d", cs.Rekeys, want)
	}
	if d := int64(cs.Rekeys) - int64(ss.Rekeys); d < 0 || d > 1 {
		t.Errorf("client rekeyed %d times, server %d", cs.Rekeys, ss.Rekeys)
	}
}
