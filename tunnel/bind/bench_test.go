package bind

import (
	"testing"
	"time"
)

// BenchmarkLoopback measures WriteBatch plus ReadBatch of 1472-byte
// datagrams over loopback, one batch per iteration on one goroutine, so
// the figures are the CPU cost of both ends per datagram. It reports
// datagrams/s, Gbit/s of UDP payload and system calls per datagram (both
// ends together). gro/batch64 is the receive of a host whose NIC does
// not coalesce UDP: GRO on, nothing coalesced, each datagram received
// straight into the caller's buffer.
func BenchmarkLoopback(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"gso-gro/batch64", Options{}},
		{"gro/batch64", Options{DisableGSO: true}},
		{"plain/batch64", Options{DisableGSO: true, DisableGRO: true}},
		{"plain/batch1", Options{DisableGSO: true, DisableGRO: true, BatchSize: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchLoopback(b, bc.opts, 1472) })
	}
}

func benchLoopback(b *testing.B, o Options, size int) {
	tx := listen(b, "udp4", "127.0.0.1:0", o)
	rx := listen(b, "udp4", "127.0.0.1:0", o)
	watchdog(b, 5*time.Minute, tx, rx)
	batch := tx.BatchSize()
	out, _, _ := buffers(batch, size)
	in, sizes, eps := buffers(rx.BatchSize(), 1500)
	dst := rx.LocalAddr()
	b.SetBytes(int64(batch * size))
	b.ReportAllocs()
	t0, r0 := tx.Stats(), rx.Stats()
	b.ResetTimer()
	for range b.N {
		if err := tx.WriteBatch(out, dst); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < batch; {
			n, err := rx.ReadBatch(in, sizes, eps)
			if err != nil {
				b.Fatalf("ReadBatch: %v (receiver %+v)", err, rx.Stats())
			}
			got += n
		}
	}
	b.StopTimer()
	t1, r1 := tx.Stats(), rx.Stats()
	pkts := float64(b.N * batch)
	secs := b.Elapsed().Seconds()
	syscalls := float64(t1.WriteSyscalls - t0.WriteSyscalls + r1.ReadSyscalls - r0.ReadSyscalls)
	b.ReportMetric(pkts/secs, "pkts/s")
	b.ReportMetric(pkts*float64(size)*8/secs/1e9, "Gbit/s")
	b.ReportMetric(syscalls/pkts, "syscalls/pkt")
	if d := r1.Dropped - r0.Dropped; d != 0 {
		b.Errorf("%d datagrams dropped", d)
	}
}
