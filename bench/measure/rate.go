package measure

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
)

// ipUDPHeaderBytes is what IPv4 and UDP add to each datagram's payload; the
// emulator limits IP bytes, so the receiver counts payload plus this.
const ipUDPHeaderBytes = 28

// RateResult is what the receiver of a paced UDP flow saw.
type RateResult struct {
	SentPackets, ReceivedPackets int
	ReceivedIPBytes              int64
	Duration                     time.Duration // first to last arrival
	RateBps                      float64       // IP bits per second between first and last arrival
}

// Rate sends UDP datagrams of payloadBytes from fromNS/fromAddr to toNS/toAddr
// at offeredBps (bits/s of IP bytes) for d and measures the rate IP bytes
// arrive at. Offer more than the link rate, so arrivals are spaced by it.
// It waits settle after the sender stops.
func Rate(ctx context.Context, fromNS string, fromAddr netip.Addr, toNS string, toAddr netip.Addr, offeredBps float64, payloadBytes int, d, settle time.Duration) (RateResult, error) {
	const port = 9008
	var res RateResult
	rcv, err := listenUDP(toNS, netip.AddrPortFrom(toAddr, port), 64<<20)
	if err != nil {
		return res, err
	}
	defer rcv.Close()
	snd, err := listenUDP(fromNS, netip.AddrPortFrom(fromAddr, 0), 8<<20)
	if err != nil {
		return res, err
	}
	defer snd.Close()

	var (
		mu          sync.Mutex
		first, last time.Time
		count       int
		bytes       int64
		firstBytes  int
	)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pc := ipv4.NewPacketConn(rcv)
		msgs := make([]ipv4.Message, 64)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, 65536)}
		}
		for {
			n, err := pc.ReadBatch(msgs, 0)
			if err != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			for i := 0; i < n; i++ {
				sz := msgs[i].N + ipUDPHeaderBytes
				if count == 0 {
					first, firstBytes = now, sz
				}
				count++
				bytes += int64(sz)
			}
			last = now
			mu.Unlock()
		}
	}()

	dst := netip.AddrPortFrom(toAddr, port)
	if err := snd.SetWriteBuffer(8 << 20); err != nil {
		return res, err
	}
	// UDP GSO lets one sender offer 1 Gbit/s and more; the kernel splits
	// the batches before the TUN.
	const batch = 16
	gso := enableGSO(snd, payloadBytes)
	buf := make([]byte, payloadBytes*batch)
	pc := ipv4.NewPacketConn(snd)
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{buf[:payloadBytes]}
		msgs[i].Addr = netUDPAddr(dst)
	}
	pktBits := float64((payloadBytes + ipUDPHeaderBytes) * 8)
	// The emulator runs at real-time priority; give the sender's thread the
	// same, or at high rates the emulator's threads starve it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restorePrio := realtimeThread()
	defer restorePrio()
	start := time.Now()
	sent := 0
	for {
		el := time.Since(start)
		if el >= d || ctx.Err() != nil {
			break
		}
		due := int(el.Seconds()*offeredBps/pktBits) + 1
		if due <= sent {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		n := min(due-sent, batch)
		var err error
		if gso {
			_, err = snd.WriteToUDPAddrPort(buf[:n*payloadBytes], dst)
		} else {
			n, err = pc.WriteBatch(msgs[:n], 0)
		}
		if err != nil {
			// ENOBUFS and the like: the sender's own queue is full;
			// the emulator sees the offered load anyway.
			time.Sleep(100 * time.Microsecond)
			continue
		}
		sent += n
	}
	res.SentPackets = sent
	select {
	case <-ctx.Done():
	case <-time.After(settle):
	}
	rcv.Close()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.ReceivedPackets = count
	res.ReceivedIPBytes = bytes
	res.Duration = last.Sub(first)
	if count < 100 || res.Duration <= 0 {
		return res, fmt.Errorf("rate probe: only %d of %d packets arrived", count, sent)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.RateBps = float64(bytes-int64(firstBytes)) * 8 / res.Duration.Seconds()
	if res.RateBps <= 0 {
		return res, errors.New("rate probe: no measurable rate")
	}
	return res, nil
}
