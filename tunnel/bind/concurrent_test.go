package bind

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"
)

// TestConcurrent runs several writers on one Conn and, at the same time, a
// reader and a Stats poller on the other (run it with -race). Each
// writer's datagrams must arrive complete and in that writer's order.
func TestConcurrent(t *testing.T) {
	bothOffloads(t, func(t *testing.T, opts Options) {
		a := listen(t, "udp4", "127.0.0.1:0", opts)
		b := listen(t, "udp4", "127.0.0.1:0", opts)
		if s := b.Stats(); s.ReadBuffer != 0 && s.ReadBuffer < 2<<20 {
			t.Skipf("receive buffer of %d bytes could overflow; needs CAP_NET_ADMIN or net.core.rmem_max ≥ 1 MiB", s.ReadBuffer)
		}
		watchdog(t, 20*time.Second, a, b)
		const writers, each, size = 4, 256, 512

		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				out, _, _ := buffers(16, size)
				for seq := 0; seq < each; seq += len(out) {
					for i, d := range out {
						binary.BigEndian.PutUint16(d, uint16(w))
						binary.BigEndian.PutUint16(d[2:], uint16(seq+i))
					}
					if err := a.WriteBatch(out, b.LocalAddr()); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
				}
			})
		}
		stop := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = a.Stats()
					_ = b.Stats()
					time.Sleep(time.Millisecond)
				}
			}
		})

		next := make([]int, writers)
		bufs, sizes, eps := buffers(b.BatchSize(), 1500)
		for got := 0; got < writers*each; {
			n, err := b.ReadBatch(bufs, sizes, eps)
			if err != nil {
				t.Fatalf("after %d datagrams: %v (sender %+v, receiver %+v)", got, err, a.Stats(), b.Stats())
			}
			for i := range n {
				w := binary.BigEndian.Uint16(bufs[i])
				seq := int(binary.BigEndian.Uint16(bufs[i][2:]))
				if sizes[i] != size || int(w) >= writers || seq != next[w] {
					t.Fatalf("datagram of %d bytes from writer %d with seq %d, want seq %d", sizes[i], w, seq, next[w])
				}
				next[w]++
			}
			got += n
		}
		close(stop)
		wg.Wait()
	})
}
