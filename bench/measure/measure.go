// Package measure holds the lab's own probes: a UDP echo RTT probe and a
// paced UDP flow that measures a link's rate at the receiver, opening
// sockets inside the lab's namespaces.
package measure

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
)

// listenUDP opens a UDP socket bound to laddr inside namespace ns with
// receive and send buffers of bufBytes (forced past the sysctl maximum).
func listenUDP(ns string, laddr netip.AddrPort, bufBytes int) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := lab.InNetns(ns, func() error {
		var err error
		network := "udp4"
		if laddr.Addr().Is6() {
			network = "udp6"
		}
		c, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(laddr))
		if err != nil {
			return fmt.Errorf("listen udp %v in %s: %w", laddr, ns, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if bufBytes > 0 {
		raw, err := c.SyscallConn()
		if err == nil {
			_ = raw.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, bufBytes)
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, bufBytes)
			})
		}
	}
	return c, nil
}

// RTTResult summarises an RTT probe.
type RTTResult struct {
	Sent, Received        int
	Min, Median, P90, Max time.Duration
	Samples               []time.Duration `json:"-"`
}

// RTT sends count UDP probes, interval apart, from fromAddr in fromNS to an
// echo responder it runs at toAddr in toNS, and reports the round-trip
// times. It waits up to wait after the last probe for stragglers.
func RTT(ctx context.Context, fromNS string, fromAddr netip.Addr, toNS string, toAddr netip.Addr, count int, interval, wait time.Duration) (RTTResult, error) {
	const port = 9007
	srv, err := listenUDP(toNS, netip.AddrPortFrom(toAddr, port), 1<<20)
	if err != nil {
		return RTTResult{}, err
	}
	defer srv.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // echo responder
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	defer wg.Wait()
	cli, err := listenUDP(fromNS, netip.AddrPortFrom(fromAddr, 0), 1<<20)
	if err != nil {
		return RTTResult{}, err
	}
	defer cli.Close()

	base := time.Now()
	res := RTTResult{Sent: count}
	got := make([]time.Duration, count)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		buf := make([]byte, 2048)
		for {
			n, err := cli.Read(buf)
			if err != nil {
				return
			}
			now := time.Since(base)
			if n < 12 {
				continue
			}
			seq := binary.BigEndian.Uint32(buf[0:4])
			sent := time.Duration(binary.BigEndian.Uint64(buf[4:12]))
			if int(seq) < count && got[seq] == 0 {
				got[seq] = now - sent
			}
		}
	}()
	dst := netip.AddrPortFrom(toAddr, port)
	pkt := make([]byte, 64)
	for i := 0; i < count; i++ {
		binary.BigEndian.PutUint32(pkt[0:4], uint32(i))
		binary.BigEndian.PutUint64(pkt[4:12], uint64(time.Since(base)))
		if _, err := cli.WriteToUDPAddrPort(pkt, dst); err != nil {
			return res, fmt.Errorf("send RTT probe: %w", err)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(interval):
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
	cli.Close()
	<-recvDone
	srv.Close()
	for _, d := range got {
		if d > 0 {
			res.Samples = append(res.Samples, d)
		}
	}
	res.Received = len(res.Samples)
	if res.Received == 0 {
		return res, errors.New("no RTT probe came back: the link is down or drops everything")
	}
	s := slices.Clone(res.Samples)
	slices.Sort(s)
	res.Min, res.Max = s[0], s[len(s)-1]
	res.Median = s[len(s)/2]
	res.P90 = s[len(s)*9/10]
	return res, nil
}
