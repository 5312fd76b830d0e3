package edge

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// restartFlags names, for each Config field a running edge cannot change,
// the flag that sets it: a reload that changes one is refused.
var restartFlags = map[string]string{
	"TUN": "--tun", "TUNSetup": "--tun-setup", "TUNAddrs": "--tun-addr", "TUNRoutes": "--route",
	"MTU": "--mtu", "CaptureDir": "--capture", "PrivateKey": "--key", "PeerKey": "--peer-key",
	"Listen": "--listen", "Peer": "--peer", "PeerHost": "--peer", "CC": "--cc", "PeerTimeout": "--peer-timeout",
	"WANRateBps": "--wan-rate", "TunnelMTU": "--tunnel-mtu", "Transparent": "--egress", "DialTimeout": "--dial-timeout",
	"MaxFlows": "--max-flows", "FlowIdleTimeout": "--flow-idle-timeout", "MemoryMiB": "--memory-mib",
	"Control": "--control", "Metrics": "--metrics", "Branches": "--branch", "PeerName": "--peer-name",
}

// reloadable are the Config fields a reload applies, and those it
// ignores (not configuration: how the edge was built).
var reloadable = map[string]bool{"Policy": true, "NearRules": true, "Branches": true, "Upstreams": true, "HubRateBps": true, "Bind": false, "Reload": false, "Logger": false, "Resolver": false}

// Reload reads the configuration again (Config.Reload) and applies it:
// the egress policy, the near rules, a hub's branches and --hub-rate, and
// a near edge's upstreams change for the flows opened from then on, and
// flows already open go on. A configuration that does not validate, or
// that changes a setting only a restart can change (keys, addresses, the
// TUN, the memory budget), is refused with the reason, and the running
// configuration stays. It returns what changed.
func (e *Edge) Reload() (changed []string, err error) {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	cur := e.config()
	eg := e.egress()
	if cur.Reload == nil {
		return nil, fmt.Errorf("reload refused: this edge was not started from a configuration it can read again")
	}
	next, err := cur.Reload()
	if err == nil {
		err = next.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("reload refused, the running configuration stays: %w", err)
	}
	next = keepResolved(cur, next.withDefaults())
	var restart []string
	cv, nv := reflect.ValueOf(cur), reflect.ValueOf(next)
	for i := range cv.NumField() {
		name := cv.Type().Field(i).Name
		if _, ok := reloadable[name]; ok {
			continue
		}
		if flag := restartFlags[name]; !reflect.DeepEqual(cv.Field(i).Interface(), nv.Field(i).Interface()) && !slices.Contains(restart, flag) {
			restart = append(restart, flag)
		}
	}
	if (len(cur.Branches) > 0) != (len(next.Branches) > 0) {
		restart = append(restart, "--branch (a hub and a single peer's edge are not the same)")
	}
	if (len(cur.Upstreams) > 0) != (len(next.Upstreams) > 0) {
		restart = append(restart, "--upstream (several upstreams and a single --peer are not the same)")
	}
	if len(restart) > 0 {
		return nil, fmt.Errorf("reload refused, the running configuration stays: %s cannot change without a restart", strings.Join(restart, ", "))
	}
	if cur.Policy.String() != next.Policy.String() {
		if eg != nil {
			eg.SetPolicy(next.Policy)
		}
		changed = append(changed, fmt.Sprintf("egress policy: %s", next.Policy))
	}
	if cur.NearRules.String() != next.NearRules.String() {
		if e.near != nil {
			e.near.SetRules(next.NearRules)
		}
		changed = append(changed, "near rules: "+next.NearRules.String())
		if next.NearRules.HasTCPPass() && !cur.NearRules.HasTCPPass() {
			e.log.Warn(PassTCPWarning)
		}
	}
	if cur.HubRateBps != next.HubRateBps {
		if next.HubRateBps == 0 {
			changed = append(changed, "hub rate: none (the branches' caps are lifted)")
		} else {
			changed = append(changed, fmt.Sprintf("hub rate: %d bit/s", next.HubRateBps))
		}
	}
	e.mu.Lock()
	e.cfg.Policy, e.cfg.Branches, e.cfg.Upstreams = next.Policy, next.Branches, next.Upstreams
	e.cfg.NearRules = next.NearRules
	e.cfg.HubRateBps = next.HubRateBps // the share loop reads it at its next interval
	running := e.run != nil
	e.mu.Unlock()
	if running {
		changed = append(changed, e.reloadBranches(next)...)
	}
	if e.router != nil {
		changed = append(changed, e.reloadUpstreams(next)...)
	}
	if len(changed) == 0 {
		e.log.Info("configuration reloaded: nothing changed")
	} else {
		e.log.Info("configuration reloaded", "changed", strings.Join(changed, "; "))
	}
	return changed, nil
}

// keepResolved returns next with the running addresses of the peer and
// the upstreams whose host name and port it keeps: reading the
// configuration again looks the names up again, and a new answer is no
// new configuration (the loop that dials a peer follows its name while
// the tunnel is down; a reload must neither be refused for it nor
// restart a tunnel).
func keepResolved(cur, next Config) Config {
	same := func(host string, addr netip.AddrPort, nhost string, naddr netip.AddrPort) bool {
		return host != "" && host == nhost && addr.Port() == naddr.Port()
	}
	if same(cur.PeerHost, cur.Peer, next.PeerHost, next.Peer) {
		next.Peer = cur.Peer
	}
	running := map[string]Upstream{}
	for _, u := range cur.Upstreams {
		running[u.Name] = u
	}
	next.Upstreams = slices.Clone(next.Upstreams)
	for i, nu := range next.Upstreams {
		if u, ok := running[nu.Name]; ok && same(u.Host, u.Addr, nu.Host, nu.Addr) {
			next.Upstreams[i].Addr = u.Addr
		}
	}
	return next
}

// config returns the configuration in force (Reload may change it).
func (e *Edge) config() Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// reloadBranches brings a running hub's branches to next's: a branch
// removed (or whose key changed) stops, its tunnel closing and its flows
// reset; a branch added starts at once; the others keep their tunnels and
// flows and take their new rules.
func (e *Edge) reloadBranches(next Config) (changed []string) {
	want := map[string]Branch{}
	for _, b := range next.Branches {
		want[b.Name] = b
	}
	have := map[string]bool{}
	for _, b := range e.hubBranches() {
		if nb, ok := want[b.Name]; !ok || nb.Key != b.Key {
			e.stopBranch(b.Name)
			changed = append(changed, "branch "+b.Name+" removed")
			continue
		}
		have[b.Name] = true
		if p := next.branchPolicy(want[b.Name]); b.eg.Policy().String() != p.String() {
			b.eg.SetPolicy(p)
			changed = append(changed, fmt.Sprintf("branch %s egress policy: %s", b.Name, p))
		}
	}
	for _, b := range next.Branches {
		if !have[b.Name] {
			e.startBranch(next, b)
			changed = append(changed, "branch "+b.Name+" added")
		}
	}
	return changed
}
