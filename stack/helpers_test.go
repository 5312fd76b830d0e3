package stack

import (
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// plainHost is an ordinary gVisor IPv4 host on ep owning only addr, with
// a default route out of ep: the client or server beside a Stack under
// test. It is closed when the test ends (after cleanups registered later).
func plainHost(t *testing.T, ep gstack.LinkEndpoint, addr [4]byte) *gstack.Stack {
	t.Helper()
	h := gstack.New(gstack.Options{
		NetworkProtocols:   []gstack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []gstack.TransportProtocolFactory{tcp.NewProtocol},
	})
	t.Cleanup(func() {
		h.Close()
		h.Wait()
	})
	if terr := h.CreateNIC(1, ep); terr != nil {
		t.Fatal(terr)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(addr).WithPrefix()}
	if terr := h.AddProtocolAddress(1, pa, gstack.AddressProperties{}); terr != nil {
		t.Fatal(terr)
	}
	h.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	return h
}
