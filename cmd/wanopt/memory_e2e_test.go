package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/edge/control"
)

// stallPort's server writes to each connection until it closes and never
// reads from it.
const stallPort = 7005

// handleStall writes to c until the write fails and reads nothing.
func handleStall(c *net.TCPConn) {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// TestEdgeMemoryBudget opens 1,000 flows through edges run with
// --memory-mib 16, each holding data neither end reads: the client writes
// to a server that never reads, and the server to a client that never
// reads. Each edge's peak RSS must stay within the budget plus the fixed
// overhead documented in package edge (edge.FixedOverheadMiB); the opens
// the budget cannot hold must be refused (the client sees a reset, at once)
// rather than admitted; and once the flows close the edges must serve a new
// one.
func TestEdgeMemoryBudget(t *testing.T) {
	const flows, budgetMiB, workers = 1000, 16, 16
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 10 * time.Millisecond, RateBps: 200_000_000}
	e := startEdgeLab(t, ctx, link, link, harness.EdgeOptions{
		Args:  []string{"--memory-mib", fmt.Sprint(budgetMiB)},
		Allow: []string{fmt.Sprintf("198.18.2.2/32:%d,%d", echoPort, stallPort)},
	})
	serveIn(t, e.l.Server.NS, stallPort, handleStall)
	limit := uint64(budgetMiB+edge.FixedOverheadMiB) << 20
	var peak [2]uint64
	sample := func() {
		for i, side := range []string{"near", "far"} {
			m, err := e.edges.Memory(side)
			if err != nil {
				t.Fatal(err)
			}
			peak[i] = max(peak[i], m.PeakBytes)
		}
	}
	sample()
	t.Logf("with the tunnel up: near edge peak RSS %.1f MiB, far edge %.1f MiB", mib(peak[0]), mib(peak[1]))

	var (
		mu                 sync.Mutex
		conns              []net.Conn
		refused, otherErrs atomic.Int64
		firstErr           atomic.Value
		writers            sync.WaitGroup
		next               atomic.Int64
		written            atomic.Int64
		dialers            sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		dialers.Add(1)
		go func() {
			defer dialers.Done()
			for next.Add(1) <= flows {
				c, err := dialIn(ctx, e.l.Client.NS, stallPort, 10*time.Second)
				switch {
				case errors.Is(err, syscall.ECONNREFUSED):
					refused.Add(1)
					continue
				case err != nil:
					otherErrs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				writers.Add(1)
				go func() {
					defer writers.Done()
					buf := make([]byte, 16<<10)
					for {
						n, err := c.Write(buf)
						written.Add(int64(n))
						if err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	dialers.Wait()
	opened := len(conns)
	t.Logf("%d opens in %v: %d admitted, %d refused, %d other errors (first: %v)",
		flows, time.Since(start).Round(time.Millisecond), opened, refused.Load(), otherErrs.Load(), firstErr.Load())

	// Let every admitted flow fill what it may hold, sampling as it does.
	for range 20 {
		time.Sleep(500 * time.Millisecond)
		sample()
	}
	t.Logf("after the opens: near edge peak RSS %.1f MiB, far edge %.1f MiB (limit %d MiB budget + %d MiB fixed overhead); %d MiB written by the clients",
		mib(peak[0]), mib(peak[1]), budgetMiB, edge.FixedOverheadMiB, written.Load()>>20)
	for _, side := range []string{"near", "far"} {
		s, err := e.edges.Status(side)
		if err != nil {
			t.Fatal(err)
		}
		m := s.Memory
		t.Logf("%s edge: %d of %d flows admitted, %d refused; grants %.1f of %.1f MiB, %d refused; tunnel stream buffers %.1f of %.1f MiB",
			side, m.Flows, m.MaxFlows, m.FlowsRefused, mib(uint64(m.GrantedBytes)), mib(uint64(m.GrantLimitBytes)), m.GrantsRefused,
			mib(s.Tunnel.BudgetUsedBytes), mib(s.Tunnel.BudgetBytes))
		if side == "near" && (m.Flows != int64(opened) || m.FlowsRefused != uint64(refused.Load()) || s.Ingress.OverBudget != m.FlowsRefused) {
			t.Errorf("near edge: %d flows admitted and %d refused (ingress: %d over budget); the clients saw %d and %d",
				m.Flows, m.FlowsRefused, s.Ingress.OverBudget, opened, refused.Load())
		}
		// Every flow pressed for memory: the grants are spent, and the
		// flows beyond them held to their floors.
		if m.GrantsRefused == 0 || m.GrantedBytes == 0 {
			t.Errorf("%s edge: %.1f MiB granted, %d grants refused: the flows did not press for memory", side, mib(uint64(m.GrantedBytes)), m.GrantsRefused)
		}
	}
	for i, side := range []string{"near", "far"} {
		if peak[i] > limit {
			t.Errorf("the %s edge's peak RSS is %.1f MiB, above the %d MiB budget + %d MiB fixed overhead", side, mib(peak[i]), budgetMiB, edge.FixedOverheadMiB)
		}
	}
	if otherErrs.Load() > 0 {
		t.Errorf("%d opens failed other than by a refusal (first: %v): an open the budget cannot hold must be refused at once", otherErrs.Load(), firstErr.Load())
	}
	if opened == flows || refused.Load() == 0 {
		t.Errorf("%d of %d flows admitted, %d refused: at %d MiB the budget cannot hold them all", opened, flows, refused.Load(), budgetMiB)
	}
	if limit := edge.PlanMemory(budgetMiB, 1<<30).FlowLimit; opened != limit { // the budget caps the flows, not --max-flows
		t.Errorf("%d flows admitted; the budget holds %d", opened, limit)
	}

	for _, c := range conns {
		c.Close()
	}
	writers.Wait()
	if err := e.edges.WaitNoFlows(30 * time.Second); err != nil {
		// What each edge holds, to tell a flow stuck on the LAN side
		// (its netstack connection) from one stuck in the tunnel.
		for _, side := range []string{"near", "far"} {
			var fl []control.Flow
			if err := control.Query(e.sock(side), "flows", &fl); err != nil {
				t.Logf("%s edge: %v", side, err)
			}
			for _, f := range fl {
				t.Logf("%s edge still lists %s -> %s: %s, %s, %d bytes up, %d down, age %v",
					side, f.Src, f.Dst, f.State, f.Why, f.BytesUp, f.BytesDown, f.Age.Round(time.Second))
			}
		}
		t.Fatal(err)
	}
	echoHashed(t, ctx, e.l.Client.NS, 1<<20, 7, 20*time.Second)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
