package edge

import (
	"fmt"
	"strings"
	"time"
)

// Ready reports whether the edge carries flows now, and if not, why, in
// one line for an operator ("tunnel to 192.0.2.2:4500 down since 12s: no
// answer to 3 handshakes"). It is what a health check (/readyz) and the
// service manager's readiness wait for:
//
//   - the edge runs (Run has started and not yet stopped);
//   - its tunnel is up: the one peer's; on a hub, at least one branch's
//     (each branch is its own site, and one up serves its clients); with
//     several upstreams, every upstream's (a flow to a down upstream's
//     routes fails, so the edge is not whole);
//   - with a TUN for ingress, the ingress is open and accepts flows (not
//     shut down). The memory budget turning flows away is not counted:
//     that passes with the load.
//
// A responder (far edge) whose peer has not handshaken yet is not ready:
// "no tunnel up".
func (e *Edge) Ready() (ready bool, reason string) {
	now := time.Now()
	e.mu.Lock()
	running, stopping, ingress := e.running, e.stopping, e.ingressOpen
	e.mu.Unlock()
	cfg := e.config()
	switch {
	case !running:
		return false, "edge not running"
	case stopping:
		return false, "edge stopping"
	case cfg.TUN != "" && !ingress:
		return false, fmt.Sprintf("ingress on TUN %s not open", cfg.TUN)
	}
	switch {
	case len(cfg.Branches) > 0:
		var down []string
		for _, b := range e.hubBranches() {
			if b.link.isUp() {
				return true, ""
			}
			down = append(down, b.Name)
		}
		if len(down) == 0 {
			return false, "no branch configured"
		}
		return false, fmt.Sprintf("no tunnel up: no branch has handshaken (%s)%s", strings.Join(down, ", "), e.refusedReason())
	case e.router != nil:
		var down []string
		for _, u := range e.router.list() {
			if !u.link.isUp() {
				down = append(down, "upstream "+u.Name+": "+u.link.downReason(now))
			}
		}
		if len(down) > 0 {
			return false, strings.Join(down, "; ")
		}
		return true, ""
	}
	if e.link.isUp() {
		return true, ""
	}
	if !e.link.initiator {
		return false, "no tunnel up: " + e.link.downReason(now) + e.refusedReason()
	}
	return false, e.link.downReason(now)
}

// Serving reports whether Run has set up everything that comes before
// the tunnels (the ingress, the control socket, the metrics listener) and
// now keeps them up: from then on a far edge (responder) is ready for its
// peers, though Ready says no until one has handshaken. A service
// manager's readiness waits for it on a far edge, for Ready on a near one.
func (e *Edge) Serving() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.serving && e.running && !e.stopping
}

func (e *Edge) setServing() {
	e.mu.Lock()
	e.serving = true
	e.mu.Unlock()
}

// refusedReason adds a responder's refused initiations to its reason: an
// edge knocking with a key not known here is the usual cause.
func (e *Edge) refusedReason() string {
	if e.refusals == nil {
		return ""
	}
	s := e.refusals.Stats()
	var n uint64
	for _, c := range s.ByReason {
		n += c
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d initiation%s refused, the last (%s) from %v", n, plural(n), s.Last.Reason, s.Last.From)
}
