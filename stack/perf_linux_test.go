//go:build linux

package stack

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// TestThroughput measures bulk throughput through the stack, client in the
// namespace → TUN → stack → fake dialer → loopback sink, and the reverse,
// at MTU 1500 and 65535. It is a measurement, not a check: set
// WOST_THROUGHPUT=1 to run it (without -race for meaningful figures).
func TestThroughput(t *testing.T) {
	if os.Getenv("WOST_THROUGHPUT") == "" {
		t.Skip("measurement; set WOST_THROUGHPUT=1 to run")
	}
	const dur = 3 * time.Second
	chunk := tcptest.Payload(1, 256<<10)
	for _, link := range []struct {
		name    string
		mtu     int
		offload bool
	}{{"mtu1500", 1500, false}, {"mtu65535", 65535, false}, {"mtu1500-offload", 1500, true}, {"mtu65535-offload", 65535, true}} {
		mtu := link.mtu
		for _, dir := range []string{"up", "down"} {
			t.Run(dir+"/"+link.name, func(t *testing.T) {
				addr := tcptest.Server(t, func(c *net.TCPConn) {
					if dir == "up" {
						io.Copy(io.Discard, c)
						return
					}
					for {
						if _, err := c.Write(chunk); err != nil {
							return
						}
					}
				})
				l := newLabLink(t, mtu, link.offload, &fakeDialer{target: addr}, Config{})
				c, err := l.dial(context.Background(), netip.AddrPortFrom(interAddr, 5001))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				var n int64
				start := time.Now()
				c.SetDeadline(start.Add(dur))
				if dir == "up" {
					for time.Since(start) < dur {
						k, err := c.Write(chunk)
						n += int64(k)
						if err != nil {
							break
						}
					}
				} else {
					buf := make([]byte, 256<<10)
					for {
						k, err := c.Read(buf)
						n += int64(k)
						if err != nil {
							break
						}
					}
				}
				el := time.Since(start)
				t.Logf("%s %s: %.2f Gbit/s (%d MB in %v)", link.name, dir, float64(n)*8/el.Seconds()/1e9, n>>20, el.Round(time.Millisecond))
			})
		}
	}
}

// TestIdleMemory opens WOST_IDLE (default 2000 when set to 1) idle
// intercepted connections and reports the Go heap and stack growth per
// connection. The far side of each flow is an in-memory idle flow.Conn; the
// count includes the test's client sockets (a few hundred bytes each), so it
// slightly overestimates the edge's cost.
func TestIdleMemory(t *testing.T) {
	v := os.Getenv("WOST_IDLE")
	if v == "" {
		t.Skip("measurement; set WOST_IDLE=N (N connections) to run")
	}
	n, _ := strconv.Atoi(v)
	if n <= 1 {
		n = 2000
	}
	lim := syscall.Rlimit{Cur: uint64(n + 1000), Max: uint64(n + 1000)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Logf("raise RLIMIT_NOFILE: %v", err)
	}
	l := newLab(t, 1500, dialerFunc(func(context.Context, netip.AddrPort, netip.AddrPort) (flow.Conn, error) {
		return newIdleFlow(), nil
	}), Config{MaxInFlight: 4096})

	measure := func() (heap, stack uint64) {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse, m.StackInuse
	}
	heap0, stack0 := measure()
	conns := make([]*net.TCPConn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var failed int
	var fmu sync.Mutex
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, uint16(10000+i%1000)))
			if err != nil {
				fmu.Lock()
				if failed == 0 {
					t.Logf("first failure: conn %d: %v", i, err)
				}
				failed++
				fmu.Unlock()
				return
			}
			c.Write([]byte("x")) // make both copy loops run once
			conns[i] = c
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	heap1, stack1 := measure()
	s := l.st.Stats()
	t.Logf("%d idle flows (%d failed), stats %+v", s.ActiveFlows, failed, s)
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(s.ActiveFlows) / 1024 }
	t.Logf("memory: %.1f KiB per idle connection (heap %.1f KiB, goroutine stacks %.1f KiB; %d goroutines)",
		per(heap0+stack0, heap1+stack1), per(heap0, heap1), per(stack0, stack1), runtime.NumGoroutine())
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

type dialerFunc func(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error)

func (f dialerFunc) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	return f(ctx, src, dst)
}

// idleFlow is a far side that never sends and discards what it gets.
type idleFlow struct {
	done chan struct{}
	once sync.Once
}

func newIdleFlow() *idleFlow { return &idleFlow{done: make(chan struct{})} }

func (f *idleFlow) Read([]byte) (int, error)    { <-f.done; return 0, io.EOF }
func (f *idleFlow) Write(b []byte) (int, error) { return len(b), nil }
func (f *idleFlow) CloseWrite() error           { return nil }
func (f *idleFlow) Close() error                { f.once.Do(func() { close(f.done) }); return nil }
