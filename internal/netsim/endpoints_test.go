package netsim_test

import (
	"encoding/binary"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
)

// cbr sends datagrams of size bytes, each with its sequence number and send
// time, every interval from its first poll, until limit datagrams (0: no
// limit) or stop (0: never). It also records what it receives, like sink.
type cbr struct {
	sink
	size     int
	interval time.Duration
	limit    int
	stop     monotime.Time
	next     monotime.Time
	sent     int
}

func (c *cbr) done(now monotime.Time) bool {
	return (c.limit > 0 && c.sent >= c.limit) || (!c.stop.IsZero() && !now.Before(c.stop))
}

func (c *cbr) PollTransmit(now monotime.Time, buf []byte) int {
	if c.size == 0 || c.done(now) {
		return 0
	}
	if c.next.IsZero() {
		c.next = now
	}
	if now.Before(c.next) {
		return 0
	}
	binary.BigEndian.PutUint64(buf, uint64(c.sent))
	binary.BigEndian.PutUint64(buf[8:], uint64(now))
	c.sent++
	c.next = c.next.Add(c.interval)
	return c.size
}

func (c *cbr) NextTimeout() monotime.Time {
	if c.size == 0 || c.next.IsZero() || c.done(c.next) {
		return 0
	}
	return c.next
}

func (c *cbr) HandleTimeout(monotime.Time) {}

// arrival is one datagram seen by a sink.
type arrival struct {
	seq    uint64
	sentAt monotime.Time
	at     monotime.Time
}

// sink counts the datagrams it receives, and records them when keep is set.
type sink struct {
	keep     bool
	got      []arrival
	n, bytes int
}

func (s *sink) HandleDatagram(now monotime.Time, b []byte) {
	s.n++
	s.bytes += len(b)
	if s.keep {
		s.got = append(s.got, arrival{
			seq:    binary.BigEndian.Uint64(b),
			sentAt: monotime.Time(binary.BigEndian.Uint64(b[8:])),
			at:     now,
		})
	}
}

var _ netsim.Endpoint = (*cbr)(nil)
