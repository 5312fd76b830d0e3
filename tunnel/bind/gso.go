package bind

const (
	// maxGSOSegments is the most datagrams in one GSO send: the kernel's
	// UDP_MAX_SEGMENTS (64 until Linux 6.x raised it; 64 is safe on all).
	maxGSOSegments = 64

	// maxGSOBytes is the most payload in one GSO send: an IPv4 packet's
	// 65535 bytes less the IPv4 and UDP headers (IPv6 allows a little
	// more; one limit keeps dual-stack sockets simple).
	maxGSOBytes = 65535 - 20 - 8
)

// gsoRun returns how many datagrams, from bufs[0], one GSO send can carry:
// a run of equal-sized datagrams, where the last may be shorter, at most
// maxSegs of them and maxBytes in all. It returns 1 when bufs[0] cannot
// start a run (it is empty or alone fills maxBytes) and 0 for no bufs.
func gsoRun(bufs [][]byte, maxSegs, maxBytes int) int {
	if len(bufs) == 0 {
		return 0
	}
	seg := len(bufs[0])
	if seg == 0 {
		return 1
	}
	total, n := seg, 1
	for n < len(bufs) && n < maxSegs {
		l := len(bufs[n])
		if l == 0 || l > seg || total+l > maxBytes {
			break
		}
		total += l
		n++
		if l < seg {
			break // a shorter datagram ends the run
		}
	}
	return n
}
