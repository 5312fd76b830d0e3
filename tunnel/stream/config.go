package stream

import "fmt"

// Defaults for Config. Both edges of a tunnel must agree on
// InitialStreamWindow and InitialConnWindow (they are the credit each side
// may use before the first MAX_STREAM_DATA / MAX_DATA arrives); the
// connection passes the peer's values to NewConnFlow and NewSendStream.
const (
	DefaultChunkBytes          = 32 << 10  // 32 KiB buffer blocks
	DefaultSendBufferBytes     = 32 << 20  // per stream: more than a 250 Mbit/s x 600 ms BDP (19 MB)
	DefaultMinSendBufferBytes  = 256 << 10 // per stream floor, granted beyond the budget
	DefaultInitialStreamWindow = 256 << 10 // per stream receive window at open
	DefaultMaxStreamWindow     = 32 << 20  // per stream receive window after auto-tuning
	DefaultInitialConnWindow   = 1 << 20   // connection receive window at start
	DefaultMaxConnWindow       = 64 << 20  // connection receive window after auto-tuning
	DefaultBudgetBytes         = 64 << 20  // connection-wide memory for windows and send buffers
)

// Config sizes the buffers and windows of one connection. A zero field takes
// its default (see the Default constants).
type Config struct {
	// ChunkBytes is the size of the fixed blocks buffers are made of. Frames
	// popped from a SendStream never span two blocks.
	ChunkBytes int
	// SendBufferBytes bounds the bytes a SendStream holds (written, not yet
	// acknowledged).
	SendBufferBytes int
	// MinSendBufferBytes is how much a SendStream may hold even when the
	// Budget is exhausted.
	MinSendBufferBytes int
	// InitialStreamWindow is a RecvStream's credit before any
	// MAX_STREAM_DATA; it is also the credit always granted regardless of
	// the Budget.
	InitialStreamWindow uint64
	// MaxStreamWindow bounds the auto-tuned stream receive window.
	MaxStreamWindow uint64
	// InitialConnWindow is the connection's credit before any MAX_DATA.
	InitialConnWindow uint64
	// MaxConnWindow bounds the auto-tuned connection receive window.
	MaxConnWindow uint64
	// BudgetBytes bounds the receive credit outstanding plus the send
	// buffers in use over all streams of the connection (see Budget).
	BudgetBytes uint64
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	set := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.SendBufferBytes == 0 {
		c.SendBufferBytes = DefaultSendBufferBytes
	}
	if c.MinSendBufferBytes == 0 {
		c.MinSendBufferBytes = min(DefaultMinSendBufferBytes, c.SendBufferBytes)
	}
	set(&c.InitialStreamWindow, DefaultInitialStreamWindow)
	set(&c.MaxStreamWindow, max(DefaultMaxStreamWindow, c.InitialStreamWindow))
	set(&c.InitialConnWindow, DefaultInitialConnWindow)
	set(&c.MaxConnWindow, max(DefaultMaxConnWindow, c.InitialConnWindow))
	set(&c.BudgetBytes, DefaultBudgetBytes)
	return c
}

// Validate reports whether c (after defaults) is consistent.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.ChunkBytes < 1024:
		return fmt.Errorf("stream: chunk size %d bytes is below 1024", c.ChunkBytes)
	case c.SendBufferBytes < 0 || c.MinSendBufferBytes < 0 || c.MinSendBufferBytes > c.SendBufferBytes:
		return fmt.Errorf("stream: send buffer %d bytes with floor %d bytes: need 0 <= floor <= buffer",
			c.SendBufferBytes, c.MinSendBufferBytes)
	case c.MaxStreamWindow < c.InitialStreamWindow:
		return fmt.Errorf("stream: max stream window %d is below initial window %d", c.MaxStreamWindow, c.InitialStreamWindow)
	case c.MaxConnWindow < c.InitialConnWindow:
		return fmt.Errorf("stream: max connection window %d is below initial window %d", c.MaxConnWindow, c.InitialConnWindow)
	}
	return nil
}
