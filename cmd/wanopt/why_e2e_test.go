package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/wanem"
)

// slowPort's server sends 16 KiB every 50 ms (about 2.6 Mbit/s) until the
// connection closes.
const slowPort = 7006

func handleSlowSource(c *net.TCPConn) {
	buf := make([]byte, 16<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEdgeFlowsWhy: 'wanopt flows --why' names what limits a flow, each
// edge from its side, on a 50 Mbit/s link: a client that reads slowly (the
// near edge says client-window), a server that sends slowly (the far edge
// says server-sends), and a bulk download (the far edge says tunnel).
func TestEdgeFlowsWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 10 * time.Millisecond, RateBps: 50_000_000}
	e := startEdgeLab(t, ctx, link, link, harness.EdgeOptions{
		Allow: []string{fmt.Sprintf("198.18.2.2/32:%d,%d", sourcePort, slowPort)}})
	serveIn(t, e.l.Server.NS, slowPort, handleSlowSource)

	// why waits up to 10 s for the edge (side) to name want for its one
	// flow, and returns the last answer.
	why := func(side, want string) string {
		t.Helper()
		var last string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			fl, err := e.edges.Flows(side)
			if err != nil {
				t.Fatal(err)
			}
			if len(fl) != 1 {
				last = fmt.Sprintf("%d flows", len(fl))
				continue
			}
			if last = fl[0].Why; last == want {
				return last
			}
		}
		return last
	}
	download := func(size uint64) net.Conn {
		t.Helper()
		c, err := dialIn(ctx, e.l.Client.NS, sourcePort, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var req [9]byte
		binary.BigEndian.PutUint64(req[:8], size)
		if _, err := c.Write(req[:]); err != nil {
			t.Fatal(err)
		}
		return c
	}
	end := func(c net.Conn) {
		c.Close()
		if err := e.edges.WaitNoFlows(20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("client reads slowly", func(t *testing.T) {
		c := download(1 << 30)
		stop := make(chan struct{})
		go func() { // 64 KiB every 100 ms: about 5 Mbit/s
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
			}
		}()
		if got := why("near", "client-window"); got != "client-window" {
			t.Errorf("near edge: %s; want client-window", got)
		}
		t.Logf("far edge says %s", why("far", "near-edge"))
		close(stop)
		end(c)
	})
	t.Run("server sends slowly", func(t *testing.T) {
		c, err := dialIn(ctx, e.l.Client.NS, slowPort, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, c)
		if got := why("far", "server-sends"); got != "server-sends" {
			t.Errorf("far edge: %s; want server-sends", got)
		}
		t.Logf("near edge says %s", why("near", "far-edge"))
		end(c)
	})
	t.Run("bulk download", func(t *testing.T) {
		c := download(1 << 30)
		go io.Copy(io.Discard, c)
		if got := why("far", "tunnel"); got != "tunnel" {
			t.Errorf("far edge: %s; want tunnel", got)
		}
		t.Logf("near edge says %s", why("near", "far-edge"))
		end(c)
	})
}
