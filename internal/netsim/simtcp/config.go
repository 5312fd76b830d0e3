package simtcp

import (
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
)

// Config describes one bulk transfer. Zero fields take the defaults shown.
type Config struct {
	// TotalBytes is how many bytes the sender transfers; <= 0 means an
	// endless flow (cross traffic).
	TotalBytes int64
	// MSS is the payload of a full segment (default 1448).
	MSS int
	// HeaderBytes is what a data segment adds on the wire to its payload
	// (default 52: IPv4, TCP, timestamps; at least 26). Pure ACKs are
	// HeaderBytes plus their SACK option.
	HeaderBytes int
	// SendBufferBytes bounds the bytes sent and not yet acknowledged
	// (default 3 MiB).
	SendBufferBytes int
	// ReceiveBufferBytes is the receiver's buffer and so its advertised
	// window (default 3 MiB).
	ReceiveBufferBytes int
	// DelayedAck makes the receiver acknowledge every second in-order
	// segment, or DelayedAckTimeout after the first one (default 40 ms, as
	// Linux); out-of-order data is acknowledged at once in any case.
	DelayedAck        bool
	DelayedAckTimeout time.Duration
	// MinRTO and InitialRTO bound the retransmission timeout (defaults 200
	// ms as Linux, 1 s as RFC 6298). The timeout never exceeds 60 s.
	MinRTO, InitialRTO time.Duration
	// Controller sets the congestion window (default NewCubic(MSS)). It is
	// owned by the Sender.
	Controller WindowController
}

// DefaultBufferBytes is the default send and receive buffer: 3 MiB.
const DefaultBufferBytes = 3 << 20

const maxRTO = 60 * time.Second

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MSS, 1448)
	def(&c.HeaderBytes, 52)
	c.HeaderBytes = max(c.HeaderBytes, minHeaderBytes)
	def(&c.SendBufferBytes, DefaultBufferBytes)
	def(&c.ReceiveBufferBytes, DefaultBufferBytes)
	defD(&c.DelayedAckTimeout, 40*time.Millisecond)
	defD(&c.MinRTO, 200*time.Millisecond)
	defD(&c.InitialRTO, time.Second)
	if c.MSS+c.HeaderBytes > netsim.MaxDatagramBytes {
		panic("simtcp: MSS+HeaderBytes exceeds netsim.MaxDatagramBytes")
	}
	if c.Controller == nil {
		c.Controller = NewCubic(c.MSS)
	}
	return c
}

// NewPair returns the two ends of a transfer configured by cfg, to be added
// to a simulator as netsim.Sim.AddFlow(sender, receiver, ...).
func NewPair(cfg Config) (*Sender, *Receiver) {
	cfg = cfg.withDefaults()
	return newSender(cfg), newReceiver(cfg)
}
