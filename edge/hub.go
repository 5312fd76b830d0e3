package edge

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/edge/share"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Branch is one peer of a hub: a near edge the hub serves on its Listen
// socket. Its flows may reach what the hub's Policy rules allow plus its
// own Allow rules; the Policy's Deny rules hold for every branch.
type Branch struct {
	Name  string
	Key   crypt.PublicKey
	Allow []egress.Rule
}

// branchName is what a branch's name may be: it appears in logs, status
// and metric labels.
var branchName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

func (c HubConfig) validate() error {
	if err := c.Shared.validate(); err != nil {
		return err
	}
	switch {
	case !c.Listen.IsValid():
		return bad("Listen", "{Listen ADDR:PORT} is required: the hub's branches dial it")
	case c.TUN != "" && !c.Transparent:
		return bad("TUN", "a hub intercepts nothing: {TUN} only serves {Transparent transparent} there")
	case len(c.Branches) == 0:
		return bad("Branches", "{Branches} is empty: a hub serves at least one branch")
	}
	names := map[string]bool{}
	keys := map[crypt.PublicKey]string{}
	own := c.PrivateKey.PublicKey()
	for _, b := range c.Branches {
		switch {
		case !branchName.MatchString(b.Name):
			return bad("Branches", "{Branches} %q: a name is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", b.Name)
		case names[b.Name]:
			return bad("Branches", "{Branches} %s is given twice", b.Name)
		case b.Key.IsZero():
			return bad("Branches", "{Branches} %s: no public key", b.Name)
		case b.Key == own:
			return bad("Branches", "{Branches} %s: that is this edge's own public key", b.Name)
		case keys[b.Key] != "":
			return bad("Branches", "{Branches} %s and %s have the same key", keys[b.Key], b.Name)
		}
		names[b.Name], keys[b.Key] = true, b.Name
	}
	return nil
}

func (c HubConfig) summary(m MemoryPlan) string {
	names := make([]string, len(c.Branches))
	for i, b := range c.Branches {
		names[i] = b.Name
	}
	s := fmt.Sprintf("hub on %v for branches %s, public key %s, cc %v, memory %d MiB (%d flows)",
		c.Listen, strings.Join(names, ", "), c.PrivateKey.PublicKey().Base64(), c.CC, c.MemoryMiB, m.FlowLimit)
	if len(c.Policy.Rules) > 0 || len(c.Policy.Deny) > 0 {
		s += ", egress for every branch to " + c.Policy.String()
	}
	return s
}

// branchPolicy is the egress policy of branch b: the hub's rules and b's
// own.
func (c HubConfig) branchPolicy(b Branch) egress.Policy {
	return egress.Policy{Rules: append(append([]egress.Rule(nil), c.Policy.Rules...), b.Allow...), Deny: c.Policy.Deny}
}

// Hub is a far edge that serves several near edges, its branches, on one
// socket: each branch has its own tunnel, egress and datagram table. With
// transparent egress it connects through its TUN. Status and Flows may
// be called at any time, also concurrently with Run.
type Hub struct {
	base
	// refusals counts and logs the initiations the hub refused, over the
	// process's life.
	refusals *driver.Refusals
	// Under mu: the configuration in force (Reload changes it); the hub's
	// socket, what its branches share and the running branches, set by
	// Run.
	cfg      HubConfig
	hub      *driver.Hub
	run      *hubRun
	branches []*branch
	// fars are the running branches' far sides (storeFarsLocked), for
	// the stack's divert functions.
	fars atomic.Pointer[[]*dgram.Far]
}

// NewHub checks cfg and returns a hub ready to Run. It opens nothing
// yet. Errors are FieldErrors.
func NewHub(cfg HubConfig) (*Hub, error) {
	cfg = cfg.defaulted().(HubConfig)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Hub{cfg: cfg, refusals: driver.NewRefusals(cfg.Logger.With("sub", "handshake"))}
	h.init(cfg.Shared, func(m MemoryPlan) string { return h.config().summary(m) })
	return h, nil
}

// config is the configuration in force.
func (h *Hub) config() HubConfig { return inForce(&h.mu, &h.cfg) }

// Role is the hub's end of the tunnels: "responder".
func (h *Hub) Role() string { return "responder" }

// Run runs the hub until ctx ends, then resets the flows still open,
// closes the tunnels and the device, and returns nil. Errors are setup
// failures (the socket, the TUN device, the control socket). Run may be
// called once.
func (h *Hub) Run(ctx context.Context) error {
	defer h.begin(ctx)()
	if h.sh.TUN != "" {
		// The TUN is the way out to the servers: a flow routed into it has
		// no peer to go to.
		nowhere := ingress.New(nil, h.log.With("sub", "bridge"))
		if err := h.openIngress(ctx, nowhere, h.divert, h.divertTCP); err != nil {
			return err
		}
		defer h.closeIngress()
	}
	stopRates := h.sampleRates(h.egresses)
	defer stopRates()
	if err := h.serveControl(ctx, h, h.Ready); err != nil {
		return err
	}
	defer h.stopControl()
	err := h.serve(ctx, h.egressDialer())
	var g egress.Stats
	for _, p := range h.peerStatus() {
		g = g.Add(p.Egress)
	}
	h.logStopped(g, ingress.Stats{})
	return err
}

// egresses are the running branches'.
func (h *Hub) egresses() []*egress.Egress {
	var out []*egress.Egress
	for _, b := range h.running() {
		out = append(out, b.eg)
	}
	return out
}

// branch is a running branch: its egress, its datagram table and its
// tunnel of the moment.
type branch struct {
	Branch
	eg *egress.Egress
	// far sends the branch's UDP and pings on, under eg's policy, and its
	// answers back through the branch's tunnel; closed when the branch's
	// loop returns (the branch removed, or the hub stopping).
	far    *dgram.Far
	cancel context.CancelFunc // stops its loop
	done   chan struct{}      // closed when its loop has returned
	mu     sync.Mutex
	t      *driver.Tunnel // nil while down
	link   *link          // its tunnel's life

	// The share loop's own (shareLoop): the tunnel it last saw, its
	// payload bytes sent then, and the cap it set.
	shareT    *driver.Tunnel
	shareSent uint64
	shareCap  uint64
}

func (b *branch) tunnel() *driver.Tunnel {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.t
}

// serve serves every branch on one socket until ctx ends.
func (h *Hub) serve(ctx context.Context, dialer flow.Dialer) error {
	cfg := h.config()
	var bc bind.Conn
	var err error
	if h.sh.Bind != nil {
		bc, err = h.sh.Bind()
	} else {
		bc, err = bind.Listen(network(cfg.Listen.Addr()), cfg.Listen, bind.Options{Logger: h.log.With("sub", "bind")})
	}
	if err != nil {
		return fmt.Errorf("open the hub's socket on %v: %w", cfg.Listen, err)
	}
	hub := driver.NewHub(bc, cfg.PrivateKey, driver.HubOptions{Logger: h.log.With("sub", "hub"), Refusals: h.refusals})
	defer hub.Close()
	r := &hubRun{ctx: ctx, hub: hub, dialer: dialer}
	// Under reloadMu, so that a reload sees every branch started or none,
	// and the branches started are those of the configuration in force.
	h.reloadMu.Lock()
	h.mu.Lock()
	h.hub, h.run = hub, r
	h.mu.Unlock()
	cfg = h.config()
	for _, b := range cfg.Branches {
		h.startBranch(cfg, b)
	}
	h.reloadMu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		h.shareLoop(ctx)
	}()
	<-ctx.Done()
	r.wg.Wait()
	return nil
}

// shareLoop divides the hub's link (HubConfig.HubRateBps, which a reload may
// change) among the branches' tunnels every share.Interval until ctx
// ends: each tunnel is capped at its max-min fair share, from what it
// sent over the last interval (see package share for why).
func (h *Hub) shareLoop(ctx context.Context) {
	tick := time.NewTicker(share.Interval)
	defer tick.Stop()
	var (
		link share.Link
		live []*branch
		use  []share.Tunnel
		caps []uint64
		last = time.Now()
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		elapsed := now.Sub(last)
		last = now
		rate := h.config().HubRateBps
		if rate == 0 {
			// No link to divide (or a reload took it away): lift the caps.
			for _, b := range h.running() {
				if b.shareCap != 0 && b.shareT.SetRateCap(0) == nil {
					b.shareCap = 0
				}
			}
			continue
		}
		live, use = live[:0], use[:0]
		for _, b := range h.running() {
			t := b.tunnel()
			if t == nil {
				continue
			}
			sent := t.Stats().Tunnel.BytesSent
			if t != b.shareT {
				// A new tunnel: no history, so it starts with a full share.
				b.shareT, b.shareSent, b.shareCap = t, sent, 0
			}
			u := share.Tunnel{CapBps: b.shareCap}
			if elapsed > 0 {
				u.SentBps = uint64(float64(sent-b.shareSent) * 8 / elapsed.Seconds())
			}
			b.shareSent = sent
			live, use = append(live, b), append(use, u)
		}
		caps = slices.Grow(caps[:0], len(live))[:len(live)]
		link.Caps(rate, use, caps)
		for i, b := range live {
			if caps[i] == b.shareCap {
				continue
			}
			if b.shareT.SetRateCap(caps[i]) == nil {
				b.shareCap = caps[i]
			}
		}
	}
}

// hubRun is what a running hub's branches share.
type hubRun struct {
	ctx    context.Context
	hub    *driver.Hub
	dialer flow.Dialer
	wg     sync.WaitGroup
}

// startBranch starts serving b (at Run, or added by a reload).
func (h *Hub) startBranch(cfg HubConfig, b Branch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.run
	ctx, cancel := context.WithCancel(r.ctx)
	br := &branch{Branch: b, cancel: cancel, done: make(chan struct{}), link: newLink(false, "", time.Now()),
		eg: egress.New(cfg.branchPolicy(b), r.dialer, h.egressOptions(h.log.With("sub", "egress", "branch", b.Name)))}
	// Check reads the policy in force: a reload's SetPolicy holds for the
	// next new datagram flow (flows open stay, as TCP flows do).
	br.far = dgram.NewFar(dgram.FarConfig{Check: br.eg.Check, WritePacket: h.writeOut(), Logger: h.log.With("sub", "dgram", "branch", b.Name)})
	h.branches = append(h.branches, br)
	h.storeFarsLocked()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(br.done)
		defer br.far.Close()
		h.branchLoop(ctx, r.hub, br)
	}()
}

// stopBranch stops serving the branch named name (removed by a reload):
// its tunnel closes and its flows are reset.
func (h *Hub) stopBranch(name string) {
	h.mu.Lock()
	var br *branch
	for i, b := range h.branches {
		if b.Name == name {
			br = b
			h.branches = append(h.branches[:i:i], h.branches[i+1:]...)
			h.storeFarsLocked()
			break
		}
	}
	h.mu.Unlock()
	if br != nil {
		br.cancel()
		<-br.done
	}
}

// branchLoop keeps b's tunnel served until ctx ends: it waits for the
// branch's handshake on the hub, serves the tunnel's flows, and starts
// over when it closes.
func (h *Hub) branchLoop(ctx context.Context, hub *driver.Hub, b *branch) {
	log := h.log.With("branch", b.Name)
	for ctx.Err() == nil {
		bc, err := hub.Bind(b.Key)
		if err != nil {
			log.Warn("the hub has no socket for the branch", "err", err)
			return
		}
		// The branches of the configuration in force share the stream
		// memory evenly: each tunnel's budget is a hard cap of its own (a
		// reload's new count applies to the tunnels that start after it).
		cfg := h.config()
		tc := h.tunnelConfig(b.Key, h.mem.share(len(cfg.Branches)), cfg.Listen.Addr(), log)
		tc.MaxUDPPayloadBytes = min(tc.MaxUDPPayloadBytes, driver.HubMaxDatagramBytes) // the hub's buffers hold the IPv4 size
		t, err := driver.Listen(ctx, driver.Config{Bind: bc, NoGate: true, Logger: log.With("sub", "driver"),
			Tunnel:     tc,
			OnDatagram: func(p []byte) { dgram.Demux(p, nil, b.far) }, Refusals: h.refusals})
		if err != nil {
			if ctx.Err() == nil {
				b.link.dialFailed(err)
				log.Warn("waiting for the branch failed; retrying", "err", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
			}
			continue
		}
		ts := t.Stats()
		b.link.cameUp(time.Now(), ts.PeerAddr.String(), ts.KeysAge)
		log.Info("branch tunnel up", "peer", ts.PeerAddr)
		b.mu.Lock()
		b.t = t
		b.mu.Unlock()
		b.far.SetTunnel(t)
		err = b.eg.Serve(ctx, t)
		b.far.SetTunnel(nil)
		b.mu.Lock()
		b.t = nil
		b.mu.Unlock()
		if err != nil && !errors.Is(err, driver.ErrTunnelClosed) {
			log.Warn("egress stopped", "err", err)
		}
		if ctx.Err() == nil {
			b.link.wentDownAt(time.Now(), t.Err())
			if errors.Is(t.Err(), tunnel.ErrPeerClosed) {
				log.Info("the branch closed its tunnel; waiting for it again", "reason", t.Err())
			} else {
				log.Warn("branch tunnel down; waiting for it again", "err", t.Err())
			}
		}
		t.Close()
	}
}

// running returns the running branches.
func (h *Hub) running() []*branch {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.branches
}

// peerStatus is the status of each branch.
func (h *Hub) peerStatus() []control.Peer {
	var out []control.Peer
	for _, b := range h.running() {
		ds := b.far.Stats()
		p := control.Peer{Name: b.Name, Key: b.Key.Base64(), Policy: b.eg.Policy().String(), Egress: b.eg.Stats(), Datagrams: &ds}
		var keysAge time.Duration
		if t := b.tunnel(); t != nil {
			p.Tunnel = tunnelStatus(t)
			keysAge = p.Tunnel.HandshakeAge
		}
		ts := b.link.snapshot(time.Now(), keysAge)
		p.TunnelState = &ts
		out = append(out, p)
	}
	return out
}

// Status reports the hub's tunnels and counters (the control socket's
// "status"): each branch's, and their sum.
func (h *Hub) Status() control.Status {
	r := h.status(h.Role())
	r.Refused = refusedStatus(h.refusals.Stats())
	if peers := h.peerStatus(); peers != nil {
		r.Peers = peers
		var ds dgram.Stats
		for _, p := range peers {
			r.Egress = r.Egress.Add(p.Egress)
			if p.Datagrams != nil {
				ds = ds.Add(*p.Datagrams)
			}
		}
		r.DatagramEgress = &ds
		h.mu.Lock()
		hub := h.hub
		h.mu.Unlock()
		if hub != nil {
			hs := hub.Stats()
			r.Hub = &hs
		}
	}
	return r
}

// Flows lists the flows through the hub now (the control socket's
// "flows"): those its TUN's stack holds, then each branch's.
func (h *Hub) Flows() []control.Flow {
	out := stackFlows(nil, h.stack(), noPeer, 0)
	for _, b := range h.running() {
		var srtt time.Duration
		if t := b.tunnel(); t != nil {
			srtt = t.Stats().Tunnel.SmoothedRTT
		}
		out = egressFlows(out, b.eg, b.Name, srtt)
	}
	return out
}

// Ready reports whether the hub carries flows now, and if not, why (see
// Near.Ready): it runs, and at least one branch's tunnel is up (each
// branch is its own site, and one up serves its clients).
func (h *Hub) Ready() (ready bool, reason string) {
	if why := h.notReady(); why != "" {
		return false, why
	}
	var down []string
	for _, b := range h.running() {
		if b.link.isUp() {
			return true, ""
		}
		down = append(down, b.Name)
	}
	if len(down) == 0 {
		return false, "no branch configured"
	}
	return false, fmt.Sprintf("no tunnel up: no branch has handshaken (%s)%s", strings.Join(down, ", "), refusedReason(h.refusals))
}

// Reload reads the configuration again (Shared.Reload) and applies it:
// the egress policy, the branches and the hub's rate change for the flows
// opened from then on, and flows already open go on. A configuration that
// does not validate, or that changes a setting only a restart can change,
// is refused with the reason, and the running configuration stays. It
// returns what changed.
func (h *Hub) Reload() (changed []string, err error) {
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	cur := h.config()
	next, err := readAgain(&h.base, cur, nil, nil)
	if err != nil {
		return nil, err
	}
	if cur.Policy.String() != next.Policy.String() {
		changed = append(changed, fmt.Sprintf("egress policy: %s", next.Policy))
	}
	if cur.HubRateBps != next.HubRateBps {
		if next.HubRateBps == 0 {
			changed = append(changed, "hub rate: none (the branches' caps are lifted)")
		} else {
			changed = append(changed, fmt.Sprintf("hub rate: %d bit/s", next.HubRateBps))
		}
	}
	h.mu.Lock()
	h.cfg.Policy, h.cfg.Branches = next.Policy, next.Branches
	h.cfg.HubRateBps = next.HubRateBps // the share loop reads it at its next interval
	running := h.run != nil
	h.mu.Unlock()
	if running {
		changed = append(changed, h.reloadBranches(next)...)
	}
	h.logReloaded(changed)
	return changed, nil
}

// reloadBranches brings a running hub's branches to next's: a branch
// removed (or whose key changed) stops, its tunnel closing and its flows
// reset; a branch added starts at once; the others keep their tunnels and
// flows and take their new rules.
func (h *Hub) reloadBranches(next HubConfig) (changed []string) {
	want := map[string]Branch{}
	for _, b := range next.Branches {
		want[b.Name] = b
	}
	have := map[string]bool{}
	for _, b := range h.running() {
		if nb, ok := want[b.Name]; !ok || nb.Key != b.Key {
			h.stopBranch(b.Name)
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
			h.startBranch(next, b)
			changed = append(changed, "branch "+b.Name+" added")
		}
	}
	return changed
}

// divertTCP is, with transparent egress, the stack's Config.DivertTCP:
// the servers' answers to the flows a branch's far side passes on.
func (h *Hub) divertTCP(p []byte) bool {
	// Each returns at once while it passes no TCP flow.
	for _, far := range h.farSides() {
		if far.DivertTCP(p) {
			return true
		}
	}
	return false
}

// divert is, with transparent egress, the stack's Config.Divert: the
// answers to the UDP and echo flows of the branch whose table holds the
// flow.
func (h *Hub) divert(p []byte) bool { return dgram.DivertAmong(p, h.farSides()...) }

// farSides returns the far sides of the running branches, read without a
// lock on the packets' path.
func (h *Hub) farSides() []*dgram.Far {
	if p := h.fars.Load(); p != nil {
		return *p
	}
	return nil
}

// storeFarsLocked publishes the branches' far sides (mu held).
func (h *Hub) storeFarsLocked() {
	fars := make([]*dgram.Far, 0, len(h.branches))
	for _, b := range h.branches {
		fars = append(fars, b.far)
	}
	h.fars.Store(&fars)
}
