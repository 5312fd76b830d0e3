package tunnel

import (
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
)

// Stats is a snapshot of a connection's counters and path model. Byte
// counts are UDP payload bytes unless the name says stream bytes.
type Stats struct {
	PacketsSent, PacketsReceived uint64
	BytesSent, BytesReceived     uint64
	HandshakesSent               uint64 // handshake initiations sent (client)

	StreamBytesSent          uint64 // new stream bytes sent (first transmissions)
	StreamBytesRetransmitted uint64 // stream bytes sent again after a loss
	StreamBytesReceived      uint64 // stream bytes received, duplicates included
	StreamBytesReadInto      uint64 // stream bytes copied straight into a waiting reader's buffer (StreamReadInto)
	PacketsLost              uint64 // packets declared lost
	SpuriousLosses           uint64 // declared lost, acknowledged later
	PTOs                     uint64 // probe timeouts

	// Dropped datagrams (from the network): DroppedPackets is the total;
	// the others say why.
	DroppedPackets         uint64
	DroppedMalformed       uint64 // header did not parse
	DroppedUnauthenticated uint64 // failed AEAD or handshake authentication
	DroppedUnknownIndex    uint64 // data for no session of ours
	DroppedDuplicates      uint64 // replayed or duplicated packet numbers
	HandshakesRejected     uint64 // authenticated initiations from keys not allowed
	HandshakeReplays       uint64 // initiations not newer than one accepted before (replays)
	CookiesReceived        uint64 // cookie replies taken (client): the server was under load
	Rekeys                 uint64 // sessions replaced by a rekey (Config.RekeyAfter)
	RejectsReceived        uint64 // REJECTs naming our session (client): the server may have restarted

	StreamsOpened   uint64 // streams we opened
	StreamsAccepted uint64 // streams the peer opened
	StreamsRefused  uint64 // peer opens refused for the stream limit
	StreamsOpen     int    // streams open now, both directions

	DatagramsSent, DatagramsReceived, DatagramsDropped uint64

	// KeysAt is when the session in use was keyed: established, or
	// rekeyed (0 before).
	KeysAt monotime.Time

	SmoothedRTT, MinRTT, LatestRTT time.Duration
	CongestionWindow               int
	BytesInFlight                  int
	PacingRateBps                  uint64
	// RateCapBps is the cap SetRateCap put on the pace (0: none).
	RateCapBps uint64
	Congestion string
	// BandwidthBps is the controller's bottleneck bandwidth estimate (BBR
	// only; 0 otherwise); BBR holds its whole model.
	BandwidthBps uint64
	BBR          cc.BBRState
	// RecvRateBps is the rate at which the peer has delivered stream data
	// to us, in bits per second (windowed maximum; 0 before any): new
	// streams' receive windows are sized from it.
	RecvRateBps uint64
	// BudgetUsedBytes and BudgetBytes are the stream memory budget in use
	// (receive credit outstanding and send buffers) and its limit; the
	// streams' initial windows and send-buffer floors may take it beyond
	// the limit (see stream.Budget).
	BudgetUsedBytes, BudgetBytes uint64
	// ConnSendCreditBytes is the connection-level credit the peer's
	// MAX_DATA leaves us for new stream bytes (0: every stream with data
	// waits for it); ConnRecvUnreadBytes the stream bytes received and not
	// yet read (they count against our MAX_DATA only past a cap: see
	// stream.ConnFlow).
	ConnSendCreditBytes, ConnRecvUnreadBytes uint64
	// Cipher is the AEAD the handshake chose for packets
	// ("aes-256-gcm" or "chacha20-poly1305"); empty before it.
	Cipher string
	// PathMTUStats is the path MTU search: the datagram size in use and
	// the probes' counts.
	PathMTUStats
}

// MinRTT returns the least round-trip time the connection has measured,
// or 0 before the first sample; unlike Stats it copies nothing.
func (c *Conn) MinRTT() time.Duration {
	if c.sender == nil {
		return 0
	}
	return c.sender.MinRTT()
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() Stats {
	s := c.stats
	s.StreamsOpen = len(c.streams)
	s.RecvRateBps = 8 * c.rxRate.bytesPerSecond()
	s.BudgetUsedBytes, s.BudgetBytes = c.flow.Budget().Used(), c.flow.Budget().Limit()
	s.ConnSendCreditBytes = c.flow.SendCredit()
	s.ConnRecvUnreadBytes = c.flow.RecvUnread()
	s.PathMTUStats = c.pmtu.snapshot()
	if c.sess != nil {
		s.Cipher = c.sess.Suite().String()
	}
	if c.sender == nil {
		return s
	}
	ss := c.sender.Stats()
	s.PacketsLost = ss.PacketsLost
	s.SpuriousLosses = ss.SpuriousLosses
	s.PTOs = ss.PTOs
	s.SmoothedRTT, s.MinRTT, s.LatestRTT = ss.SmoothedRTT, ss.MinRTT, ss.LatestRTT
	s.CongestionWindow = ss.CongestionWindow
	s.BytesInFlight = ss.BytesInFlight
	s.PacingRateBps = ss.PacingRateBps
	s.RateCapBps = ss.RateCapBps
	s.Congestion = c.ctrl.Name()
	if b, ok := c.ctrl.(*cc.BBR); ok {
		s.BBR = b.State()
		s.BandwidthBps = s.BBR.BwBps
	}
	return s
}

// HandshakesSent returns Stats().HandshakesSent without copying the rest:
// a driver reports a dial's progress from it.
func (c *Conn) HandshakesSent() uint64 { return c.stats.HandshakesSent }
