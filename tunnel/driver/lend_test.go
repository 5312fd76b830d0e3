// Tests of Stream.Lend: a copy that reads straight into the stream's send
// buffer.

package driver

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel/stream"
)

// lendAll sends src through s.Lend, filling each lent room only in part
// now and then, and closes the sending half.
func lendAll(s *Stream, src []byte, rng *rand.Rand) error {
	filled := 0
	for len(src) > 0 {
		room, err := s.Lend(filled, 64<<10)
		if err != nil {
			return err
		}
		filled = 0
		for _, b := range room {
			m := copy(b, src)
			if rng.IntN(4) == 0 { // a short read
				m = copy(b, src[:rng.IntN(m+1)])
				filled += m
				src = src[m:]
				break
			}
			filled += m
			src = src[m:]
		}
	}
	if _, err := s.Lend(filled, 0); err != nil {
		return err
	}
	return s.CloseWrite()
}

// TestLendTransfer: bytes given through Lend arrive whole and in order,
// over a path that loses packets (retransmissions come from the lent
// room), read partly straight into the reader's parked reads
// (StreamReadInto), and the memory budget is all returned.
func TestLendTransfer(t *testing.T) {
	leaktest.Check(t)
	const seed = 41
	cli, srv := lossyMemPair(t, seed)
	c, s := openAccepted(t, cli, srv)
	rng := rand.New(rand.NewPCG(41, 42))
	src := make([]byte, 6<<20)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	errc := make(chan error, 1)
	go func() { errc <- lendAll(c, src, rng) }()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("received %d bytes, not the %d sent", len(got), len(src))
	}
	if st := cli.Stats().Tunnel; st.StreamBytesRetransmitted == 0 {
		t.Fatal("nothing was retransmitted: the test path lost nothing")
	}
	// The reader's parked reads lend their buffers: what comes in order
	// goes straight into them (and the rest through the stream's buffer).
	if k := srv.Stats().Tunnel.StreamBytesReadInto; k == 0 || k >= uint64(len(src)) {
		t.Fatalf("%d of %d bytes went straight into parked reads; want some, not all (the path reorders by losing)", k, len(src))
	}
	c.Close()
	s.Close()
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 && srv.Stats().Tunnel.StreamsOpen == 0 })
	if used := cli.Stats().Tunnel.BudgetUsedBytes; used != 0 {
		t.Fatalf("sender's budget holds %d bytes after the stream ended", used)
	}
}

// TestLendWaitsForRoom: with the buffer full Lend blocks, and returns room
// for at least half of what it asks once the peer reads.
func TestLendWaitsForRoom(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 42, func(c, s *Config) {
		// The two ends must agree on the windows (the opener assumes the
		// peer's initial window from its own configuration).
		sc := stream.Config{SendBufferBytes: 256 << 10, MinSendBufferBytes: 64 << 10,
			InitialStreamWindow: 64 << 10, MaxStreamWindow: 64 << 10}
		c.Tunnel.Stream, s.Tunnel.Stream = sc, sc
	})
	c, s := openAccepted(t, cli, srv)
	lent := make(chan int, 1)
	var lendErr error
	go func() {
		filled := 0
		for {
			room, err := c.Lend(filled, 64<<10)
			if err != nil {
				lendErr = err
				lent <- -1
				return
			}
			filled = 0
			for _, b := range room {
				filled += len(b)
			}
			lent <- filled
		}
	}()
	total := 0
	for blocked := false; !blocked; {
		select {
		case n := <-lent:
			if n < 0 {
				t.Fatalf("Lend failed: %v", lendErr)
			}
			total += n
		case <-time.After(500 * time.Millisecond):
			blocked = true
		}
	}
	if total > 512<<10 {
		t.Fatalf("lent %d bytes before blocking; the buffer holds 256 KiB and the peer's window 64 KiB", total)
	}
	if _, err := s.Read(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-lent:
		if n < 32<<10 { // it waits for room for half of what it asks
			t.Fatalf("Lend after the peer read returned %d bytes, want at least 32 KiB", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lend still blocked 5 s after the peer read")
	}
	c.Close() // ends the lending goroutine with ErrStreamClosed
	if n := <-lent; n != -1 {
		t.Fatalf("Lend after Close returned %d bytes", n)
	}
	s.Close()
}

// TestLendThenClose: a stream closed while its room is lent drops the
// bytes committed later (the commit fails), finishes, and returns its
// memory; Write fails while room is lent.
func TestLendThenClose(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 43, nil)
	c, s := openAccepted(t, cli, srv)
	if _, err := c.Write([]byte("head")); err != nil {
		t.Fatal(err)
	}
	room, err := c.Lend(0, 1000)
	if err != nil || len(room) == 0 {
		t.Fatalf("Lend: %d slices, %v", len(room), err)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("Write while room is lent succeeded")
	}
	c2, s2 := openAccepted(t, cli, srv)
	room2, err := c2.Lend(0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	copy(room2[0], "tail")
	if _, err := c2.Lend(4, 0); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("commit after Close: %v, want ErrStreamClosed", err)
	}
	got, err := io.ReadAll(s2)
	if err != nil || len(got) != 0 {
		t.Fatalf("peer read %q, %v; want nothing and EOF", got, err)
	}
	c.Close()
	if _, err := c.Lend(0, 0); err != nil { // the lend ends, with nothing
		t.Fatalf("committing nothing after Close: %v", err)
	}
	if got, err := io.ReadAll(s); err != nil || string(got) != "head" {
		t.Fatalf("peer read %q, %v; want \"head\" and EOF", got, err)
	}
	s.Close()
	s2.Close()
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 && srv.Stats().Tunnel.StreamsOpen == 0 })
	if used := cli.Stats().Tunnel.BudgetUsedBytes; used != 0 {
		t.Fatalf("budget holds %d bytes after the streams ended", used)
	}
}
