package bind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"
)

// listen opens a Conn closed at the end of the test.
func listen(t testing.TB, network, addr string, o Options) Conn {
	t.Helper()
	c, err := Listen(network, netip.MustParseAddrPort(addr), o)
	if err != nil {
		t.Fatalf("Listen(%s, %s): %v", network, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// watchdog closes the Conns after d, so that a lost datagram fails a test
// (ReadBatch returns net.ErrClosed) instead of hanging it.
func watchdog(t testing.TB, d time.Duration, cs ...Conn) {
	tm := time.AfterFunc(d, func() {
		for _, c := range cs {
			c.Close()
		}
	})
	t.Cleanup(func() { tm.Stop() })
}

// buffers returns n buffers of size bytes with their sizes and eps.
func buffers(n, size int) ([][]byte, []int, []Endpoint) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n), make([]Endpoint, n)
}

// fill makes b datagram seq: the sequence number, pseudo-random bytes
// seeded by seq and the length, and a CRC32 of all that in the last 4 bytes.
// len(b) must be at least 8.
func fill(b []byte, seq uint32) {
	binary.BigEndian.PutUint32(b, seq)
	body := b[4 : len(b)-4]
	x := uint64(seq)*0x9e3779b97f4a7c15 + uint64(len(b)) | 1
	var w [8]byte
	for i := 0; i < len(body); i += 8 { // xorshift64: cheap, also under -race
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(w[:], x)
		copy(body[i:], w[:])
	}
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
}

// verify checks a datagram made by fill and returns its sequence number.
func verify(b []byte) (uint32, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("datagram of %d bytes, want at least 8", len(b))
	}
	if got, want := binary.BigEndian.Uint32(b[len(b)-4:]), crc32.ChecksumIEEE(b[:len(b)-4]); got != want {
		return 0, fmt.Errorf("datagram of %d bytes: checksum %08x, want %08x", len(b), got, want)
	}
	seq := binary.BigEndian.Uint32(b)
	want := make([]byte, len(b))
	fill(want, seq)
	if string(want) != string(b) {
		return 0, fmt.Errorf("datagram %d of %d bytes: content differs from what was sent", seq, len(b))
	}
	return seq, nil
}

// mixedSizes returns n datagram sizes in runs: mostly full 1472-byte runs
// (what GSO coalesces), runs of other sizes, shorter tails ending a run,
// and singletons, from 8 to 1472 bytes.
func mixedSizes(r *rand.Rand, n int) []int {
	sizes := make([]int, 0, n)
	for len(sizes) < n {
		size := 1472
		switch r.IntN(4) {
		case 1:
			size = 8 + r.IntN(1465)
		case 2:
			size = []int{1200, 576, 100}[r.IntN(3)]
		}
		run := 1 + r.IntN(80)
		for range run {
			sizes = append(sizes, size)
		}
		if r.IntN(2) == 0 {
			sizes = append(sizes, 8+r.IntN(size-7)) // a tail, maybe shorter
		}
	}
	return sizes[:n]
}

// echo returns every datagram c receives to its sender until c is closed.
// It reports any other error on errc.
func echo(c Conn, errc chan<- error) {
	bufs, sizes, eps := buffers(c.BatchSize(), 1500)
	out := make([][]byte, 0, len(bufs))
	for {
		n, err := c.ReadBatch(bufs, sizes, eps)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				errc <- err
			}
			close(errc)
			return
		}
		for i := 0; i < n; {
			out = out[:0]
			j := i
			for ; j < n && eps[j] == eps[i]; j++ {
				out = append(out, bufs[j][:sizes[j]])
			}
			if err := c.WriteBatch(out, eps[i]); err != nil {
				errc <- err
			}
			i = j
		}
	}
}
