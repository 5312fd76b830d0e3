package egress

import "net/netip"

// Check returns why the policy in force refuses dst, or "" if it allows
// it, as the egress checks a flow's destination (with this host's own
// addresses refused unless a rule names them). Other protocols carried to
// this egress (package dgram's UDP and ICMP) use it, so that one policy,
// with its deny-list, holds for every protocol.
func (e *Egress) Check(dst netip.AddrPort) string {
	return e.policy.Load().Check(dst, e.local.contains)
}
