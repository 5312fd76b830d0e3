package crypt

import (
	"bytes"
	"errors"
	"math"
	"sync"
	"testing"
)

const packetSize = 1350

func TestSealOpenRoundTrip(t *testing.T) {
	a, b := sessionPair(t)
	tests := []struct {
		name      string
		header    []byte
		plaintext []byte
	}{
		{"empty payload", []byte{1, 2, 3}, nil},
		{"no header", nil, []byte("payload")},
		{"one byte", []byte{0x40}, []byte{0}},
		{"full packet", bytes.Repeat([]byte{0xA5}, 13), bytes.Repeat([]byte{0x5A}, packetSize)},
	}
	pn := uint64(0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, dir := range []struct {
				name     string
				from, to *Session
			}{{"initiator to responder", a, b}, {"responder to initiator", b, a}} {
				ct, err := dir.from.Seal([]byte("prefix"), tt.header, tt.plaintext, pn)
				if err != nil {
					t.Fatalf("%s: Seal: %v", dir.name, err)
				}
				if !bytes.HasPrefix(ct, []byte("prefix")) || len(ct) != len("prefix")+len(tt.plaintext)+TagSize {
					t.Fatalf("%s: Seal did not append len(plaintext)+TagSize bytes to dst", dir.name)
				}
				pt, err := dir.to.Open(nil, tt.header, ct[len("prefix"):], pn)
				if err != nil {
					t.Fatalf("%s: Open: %v", dir.name, err)
				}
				if !bytes.Equal(pt, tt.plaintext) {
					t.Fatalf("%s: Open returned different bytes", dir.name)
				}
			}
			pn++
		})
	}
}

// packetBuf lays out a packet as the tunnel will: header, payload, and room
// for the tag, in one buffer.
func packetBuf(header, payload []byte) []byte {
	buf := make([]byte, len(header)+len(payload), len(header)+len(payload)+TagSize)
	copy(buf, header)
	copy(buf[len(header):], payload)
	return buf
}

func TestSealOpenInPlace(t *testing.T) {
	a, b := sessionPair(t)
	header := []byte{0x41, 0, 0, 0, 9, 0, 7}
	payload := bytes.Repeat([]byte("wan"), 450)
	buf := packetBuf(header, payload)
	h, p := buf[:len(header)], buf[len(header):]

	ct, err := a.Seal(p[:0], h, p, 7)
	if err != nil {
		t.Fatal(err)
	}
	if &ct[0] != &buf[len(header)] {
		t.Fatal("Seal did not seal in place")
	}
	buf = buf[:len(header)+len(ct)]
	pt, err := b.Open(ct[:0], buf[:len(header)], ct, 7)
	if err != nil {
		t.Fatal(err)
	}
	if &pt[0] != &buf[len(header)] || !bytes.Equal(pt, payload) {
		t.Fatal("Open did not open in place to the original payload")
	}
}

func TestOpenRejectsTampering(t *testing.T) {
	a, b := sessionPair(t)
	header := []byte("header!!")
	payload := []byte("the payload of a packet")
	const pn = 42
	ct, err := a.Seal(nil, header, payload, pn)
	if err != nil {
		t.Fatal(err)
	}
	type attempt struct {
		name       string
		header, ct []byte
		pn         uint64
	}
	var tests []attempt
	for i := range len(header) * 8 {
		h := append([]byte{}, header...)
		h[i/8] ^= 1 << (i % 8)
		tests = append(tests, attempt{"header bit flip", h, ct, pn})
	}
	for i := range len(ct) * 8 {
		c := append([]byte{}, ct...)
		c[i/8] ^= 1 << (i % 8)
		tests = append(tests, attempt{"ciphertext or tag bit flip", header, c, pn})
	}
	tests = append(tests,
		attempt{"other packet number", header, ct, pn + 1},
		attempt{"packet number high bit", header, ct, pn | 1<<63},
		attempt{"header dropped", nil, ct, pn},
		attempt{"header extended", append(append([]byte{}, header...), 0), ct, pn},
		attempt{"truncated", header, ct[:len(ct)-1], pn},
		attempt{"shorter than a tag", header, ct[:TagSize-1], pn},
		attempt{"empty", header, nil, pn},
	)
	for _, tt := range tests {
		if _, err := b.Open(nil, tt.header, append([]byte{}, tt.ct...), tt.pn); !errors.Is(err, ErrAuth) {
			t.Fatalf("%s: Open error = %v, want ErrAuth", tt.name, err)
		}
	}
	// Forgeries did not mark anything seen: the genuine packet opens,
	// and so would pn+1.
	if _, err := b.Open(nil, header, ct, pn); err != nil {
		t.Fatalf("genuine packet after forgeries: %v", err)
	}
	if _, err := b.Open(nil, header, ct, pn); !errors.Is(err, ErrReplay) {
		t.Fatalf("same packet again: error = %v, want ErrReplay", err)
	}
}

func TestDirectionsUseDifferentKeys(t *testing.T) {
	a, b := sessionPair(t)
	header, payload := []byte("h"), []byte("same input both ways")
	fromA, err := a.Seal(nil, header, payload, 0)
	if err != nil {
		t.Fatal(err)
	}
	fromB, err := b.Seal(nil, header, payload, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(fromA, fromB) {
		t.Fatal("both directions produced the same ciphertext: same key")
	}
	// A packet reflected back to its sender does not open.
	if _, err := a.Open(nil, header, fromA, 0); !errors.Is(err, ErrAuth) {
		t.Fatalf("reflected packet: error = %v, want ErrAuth", err)
	}
	if _, err := b.Open(nil, header, fromB, 0); !errors.Is(err, ErrAuth) {
		t.Fatalf("reflected packet: error = %v, want ErrAuth", err)
	}
	// A session from another handshake cannot open either.
	c, _ := sessionPairSeeded(t, 500)
	if _, err := c.Open(nil, header, fromB, 0); !errors.Is(err, ErrAuth) {
		t.Fatalf("packet for another session: error = %v, want ErrAuth", err)
	}
}

// sessionPairSeeded is sessionPair with another initiator ephemeral.
func sessionPairSeeded(t *testing.T, seed uint64) (a, b *Session) {
	t.Helper()
	f := newFixture(t)
	ini, m1 := message1(t, f.ikey, f.rkey.PublicKey(), 1, 1, seed)
	m2, b, err := f.resp.Respond(nil, m1, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err = ini.Consume(m2, 1)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestSealRefusesPacketNumberReuse(t *testing.T) {
	steps := []struct {
		pn     uint64
		wantOK bool
	}{
		{0, true},
		{0, false},
		{1, true},
		{10, true},
		{5, false},
		{10, false},
		{11, true},
		{math.MaxUint64, false}, // reserved: sealing it would leave no next number
		{math.MaxUint64 - 1, true},
		{math.MaxUint64 - 1, false},
		{12, false},
	}
	a, _ := sessionPair(t)
	for i, st := range steps {
		next := a.NextPacketNumber()
		dst := []byte("dst")
		out, err := a.Seal(dst, nil, []byte("x"), st.pn)
		switch {
		case st.wantOK && err != nil:
			t.Fatalf("step %d: Seal(pn %d) = %v, want success", i, st.pn, err)
		case !st.wantOK && !errors.Is(err, ErrPacketNumber):
			t.Fatalf("step %d: Seal(pn %d) error = %v, want ErrPacketNumber", i, st.pn, err)
		case !st.wantOK && (out != nil || a.NextPacketNumber() != next):
			t.Fatalf("step %d: refused Seal changed state or returned bytes", i)
		case st.wantOK && a.NextPacketNumber() != st.pn+1:
			t.Fatalf("step %d: NextPacketNumber = %d, want %d", i, a.NextPacketNumber(), st.pn+1)
		}
	}
}

func TestSealOpenDoNotAllocate(t *testing.T) {
	a, b := sessionPair(t)
	header := make([]byte, 16)
	buf := make([]byte, packetSize+TagSize)
	pn := uint64(0)
	allocs := testing.AllocsPerRun(100, func() {
		ct, err := a.Seal(buf[:0], header, buf[:packetSize], pn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Open(ct[:0], header, ct, pn); err != nil {
			t.Fatal(err)
		}
		pn++
	})
	if allocs != 0 {
		t.Fatalf("Seal+Open allocate %.1f times per packet, want 0", allocs)
	}
	forged := make([]byte, 64)
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := b.Open(forged[:0], header, forged, pn); err == nil {
			t.Fatal("forged packet opened")
		}
	})
	if allocs != 0 {
		t.Fatalf("rejecting a forged packet allocates %.1f times, want 0", allocs)
	}
}

// TestSealAndOpenConcurrently runs one sealer and one opener on each
// session at once; -race proves they share no state.
func TestSealAndOpenConcurrently(t *testing.T) {
	a, b := sessionPair(t)
	const n = 500
	pipe := func(from, to *Session, wg *sync.WaitGroup, errs chan<- error) {
		ch := make(chan []byte, 16)
		wg.Go(func() {
			defer close(ch)
			for pn := range uint64(n) {
				ct, err := from.Seal(nil, nil, []byte("concurrent"), pn)
				if err != nil {
					errs <- err
					return
				}
				ch <- ct
			}
		})
		wg.Go(func() {
			pn := uint64(0)
			for ct := range ch {
				if _, err := to.Open(nil, nil, ct, pn); err != nil {
					errs <- err
				}
				pn++
			}
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	pipe(a, b, &wg, errs)
	pipe(b, a, &wg, errs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func BenchmarkSeal(b *testing.B) {
	a, _ := sessionPair(b)
	header := make([]byte, 16)
	buf := make([]byte, packetSize+TagSize)
	b.SetBytes(packetSize)
	b.ReportAllocs()
	pn := uint64(0)
	for b.Loop() {
		if _, err := a.Seal(buf[:0], header, buf[:packetSize], pn); err != nil {
			b.Fatal(err)
		}
		pn++
	}
}

// BenchmarkOpen opens fresh packets with increasing packet numbers, in
// place, replay window included. Packets are sealed in batches with the
// timer stopped.
func BenchmarkOpen(b *testing.B) {
	const batch = 1024
	a, s := sessionPair(b)
	header := make([]byte, 16)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, packetSize+TagSize)
	}
	pn := uint64(0)
	var sealedPN uint64
	seal := func() {
		for i := range bufs {
			if _, err := a.Seal(bufs[i][:0], header, bufs[i][:packetSize], sealedPN); err != nil {
				b.Fatal(err)
			}
			sealedPN++
		}
	}
	seal()
	b.SetBytes(packetSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%batch == 0 {
			b.StopTimer()
			seal()
			b.StartTimer()
		}
		ct := bufs[i%batch]
		if _, err := s.Open(ct[:0], header, ct, pn); err != nil {
			b.Fatal(err)
		}
		pn++
	}
}
