package stack

import (
	"log/slog"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// tapEndpoint wraps the NIC's link endpoint and hands a copy of every packet
// crossing it, in both directions, to a PacketTap.
type tapEndpoint struct {
	nested.Endpoint
	tap    PacketTap
	log    *slog.Logger
	failed atomic.Bool // log the first tap error only
}

var _ gstack.LinkEndpoint = (*tapEndpoint)(nil)
var _ gstack.NetworkDispatcher = (*tapEndpoint)(nil)

func newTapEndpoint(lower gstack.LinkEndpoint, tap PacketTap, log *slog.Logger) *tapEndpoint {
	e := &tapEndpoint{tap: tap, log: log}
	e.Endpoint.Init(lower, e)
	return e
}

func (e *tapEndpoint) write(pkt *gstack.PacketBuffer) {
	v := pkt.ToView()
	err := e.tap.WritePacket(time.Now(), v.AsSlice())
	v.Release()
	if err != nil && e.failed.CompareAndSwap(false, true) {
		e.log.Warn("capture tap failed; further errors not logged", "err", err)
	}
}

// DeliverNetworkPacket taps an inbound packet and passes it up.
func (e *tapEndpoint) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *gstack.PacketBuffer) {
	e.write(pkt)
	e.Endpoint.DeliverNetworkPacket(proto, pkt)
}

// WritePackets taps outbound packets and passes them down.
func (e *tapEndpoint) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	for _, pkt := range pkts.AsSlice() {
		e.write(pkt)
	}
	return e.Endpoint.WritePackets(pkts)
}
