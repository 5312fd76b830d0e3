package bind

import (
	"log/slog"
	"sync/atomic"
)

// counters are a Conn's Stats, updated once per system call or batch, not
// per datagram, and read by Stats from any goroutine.
type counters struct {
	gso, gro, dontFragment         atomic.Bool
	tooBig                         atomic.Uint64
	readBuffer, writeBuffer        atomic.Int64
	readSyscalls, writeSyscalls    atomic.Uint64
	datagramsRead, bytesRead       atomic.Uint64
	datagramsWritten, bytesWritten atomic.Uint64
	coalesced, segmented, dropped  atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		GSO:              c.gso.Load(),
		GRO:              c.gro.Load(),
		DontFragment:     c.dontFragment.Load(),
		TooBig:           c.tooBig.Load(),
		ReadBuffer:       int(c.readBuffer.Load()),
		WriteBuffer:      int(c.writeBuffer.Load()),
		ReadSyscalls:     c.readSyscalls.Load(),
		WriteSyscalls:    c.writeSyscalls.Load(),
		DatagramsRead:    c.datagramsRead.Load(),
		BytesRead:        c.bytesRead.Load(),
		DatagramsWritten: c.datagramsWritten.Load(),
		BytesWritten:     c.bytesWritten.Load(),
		Coalesced:        c.coalesced.Load(),
		Segmented:        c.segmented.Load(),
		Dropped:          c.dropped.Load(),
	}
}

// logOpened reports a new socket's offloads and buffers, warning when the
// kernel granted less buffer than asked (it reports twice the grant).
func logOpened(log *slog.Logger, local Endpoint, o Options, s Stats) {
	if log == nil {
		return
	}
	log.Info("udp socket open", "local", local, "batch", o.BatchSize,
		"gso", s.GSO, "gro", s.GRO, "rcvbuf", s.ReadBuffer, "sndbuf", s.WriteBuffer)
	short := func(granted, asked int) bool { return granted != 0 && asked > 0 && granted/2 < asked }
	if short(s.ReadBuffer, o.ReadBuffer) || short(s.WriteBuffer, o.WriteBuffer) {
		log.Warn("kernel granted smaller socket buffers than asked; bursts may be dropped",
			"rcvbuf_asked", o.ReadBuffer, "sndbuf_asked", o.WriteBuffer,
			"fix", "raise net.core.rmem_max and net.core.wmem_max, or run with CAP_NET_ADMIN")
	}
}
