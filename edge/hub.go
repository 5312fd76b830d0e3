package edge

import (
	"context"
	"errors"
	"fmt"
	"github.com/wanopt/wanopt/edge/share"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Branch is one peer of a hub: a far edge that serves several near edges
// on its --listen socket (--branch NAME:KEY). Its flows may reach what the
// edge's --allow rules allow plus its own Allow rules (--branch-allow
// NAME:RULE); the edge's --deny rules hold for every branch.
type Branch struct {
	Name  string
	Key   crypt.PublicKey
	Allow []egress.Rule
}

// branchName is what a branch's name may be: it appears in logs, status
// and metric labels.
var branchName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// validateBranches checks a hub's branches.
func (c Config) validateBranches() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.Peer.IsValid():
		return bad("--branch makes this edge a hub that branches dial: it needs --listen, not --peer")
	case !c.PeerKey.IsZero():
		return bad("--peer-key and --branch are exclusive: a hub names each peer with --branch NAME:KEY")
	case c.TUN != "" && !c.Transparent:
		return bad("a hub intercepts nothing: --tun only serves --egress transparent there")
	}
	names := map[string]bool{}
	keys := map[crypt.PublicKey]string{}
	own := c.PrivateKey.PublicKey()
	for _, b := range c.Branches {
		switch {
		case !branchName.MatchString(b.Name):
			return bad("--branch %q: a name is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", b.Name)
		case names[b.Name]:
			return bad("--branch %s is given twice", b.Name)
		case b.Key.IsZero():
			return bad("--branch %s: no public key", b.Name)
		case b.Key == own:
			return bad("--branch %s: that is this edge's own public key", b.Name)
		case keys[b.Key] != "":
			return bad("--branch %s and %s have the same key", keys[b.Key], b.Name)
		}
		names[b.Name], keys[b.Key] = true, b.Name
	}
	return nil
}

// policy is the egress policy of branch b: the edge's rules and b's own.
func (c Config) branchPolicy(b Branch) egress.Policy {
	return egress.Policy{Rules: append(append([]egress.Rule(nil), c.Policy.Rules...), b.Allow...), Deny: c.Policy.Deny}
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

// runHub serves every branch on one socket until ctx ends.
func (e *Edge) runHub(ctx context.Context, cfg Config, dialer flow.Dialer) error {
	network := "udp"
	if cfg.Listen.Addr().Is4() {
		network = "udp4"
	}
	var bc bind.Conn
	var err error
	if cfg.Bind != nil {
		bc, err = cfg.Bind()
	} else {
		bc, err = bind.Listen(network, cfg.Listen, bind.Options{Logger: e.log.With("sub", "bind")})
	}
	if err != nil {
		return fmt.Errorf("open the hub's socket on %v: %w", cfg.Listen, err)
	}
	hub := driver.NewHub(bc, cfg.PrivateKey, driver.HubOptions{Logger: e.log.With("sub", "hub"), Refusals: e.refusals})
	defer hub.Close()
	h := &hubRun{ctx: ctx, hub: hub, dialer: dialer}
	e.mu.Lock()
	e.hub, e.run = hub, h
	e.mu.Unlock()
	for _, b := range cfg.Branches {
		e.startBranch(cfg, b)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		e.shareLoop(ctx)
	}()
	<-ctx.Done()
	h.wg.Wait()
	return nil
}

// shareLoop divides the hub's link (Config.HubRateBps, which a reload may
// change) among the branches' tunnels every share.Interval until ctx
// ends: each tunnel is capped at its max-min fair share, from what it
// sent over the last interval (see package share for why).
func (e *Edge) shareLoop(ctx context.Context) {
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
		rate := e.config().HubRateBps
		if rate == 0 {
			// No link to divide (or a reload took it away): lift the caps.
			for _, b := range e.hubBranches() {
				if b.shareCap != 0 && b.shareT.SetRateCap(0) == nil {
					b.shareCap = 0
				}
			}
			continue
		}
		live, use = live[:0], use[:0]
		for _, b := range e.hubBranches() {
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
func (e *Edge) startBranch(cfg Config, b Branch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.run
	ctx, cancel := context.WithCancel(h.ctx)
	br := &branch{Branch: b, cancel: cancel, done: make(chan struct{}), link: newLink(false, "", time.Now()),
		eg: egress.New(cfg.branchPolicy(b), h.dialer, egress.Options{
			DialTimeout: cfg.DialTimeout, MaxFlows: cfg.MaxFlows, IdleTimeout: max(0, cfg.FlowIdleTimeout),
			Budget: e.budget, Logger: e.log.With("sub", "egress", "branch", b.Name)})}
	// Check reads the policy in force: a reload's SetPolicy holds for the
	// next new datagram flow (flows open stay, as TCP flows do).
	br.far = dgram.NewFar(dgram.FarConfig{Check: br.eg.Check, WritePacket: e.farWrite(), Logger: e.log.With("sub", "dgram", "branch", b.Name)})
	e.branches = append(e.branches, br)
	e.storeHubFarsLocked()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(br.done)
		defer br.far.Close()
		e.branchLoop(ctx, cfg, h.hub, br)
	}()
}

// stopBranch stops serving the branch named name (removed by a reload):
// its tunnel closes and its flows are reset.
func (e *Edge) stopBranch(name string) {
	e.mu.Lock()
	var br *branch
	for i, b := range e.branches {
		if b.Name == name {
			br = b
			e.branches = append(e.branches[:i:i], e.branches[i+1:]...)
			e.storeHubFarsLocked()
			break
		}
	}
	e.mu.Unlock()
	if br != nil {
		br.cancel()
		<-br.done
	}
}

// branchLoop keeps b's tunnel served until ctx ends: it waits for the
// branch's handshake on the hub, serves the tunnel's flows, and starts
// over when it closes.
func (e *Edge) branchLoop(ctx context.Context, cfg Config, hub *driver.Hub, b *branch) {
	log := e.log.With("branch", b.Name)
	for ctx.Err() == nil {
		bc, err := hub.Bind(b.Key)
		if err != nil {
			log.Warn("the hub has no socket for the branch", "err", err)
			return
		}
		// The branches of the configuration in force share the stream
		// memory evenly: each tunnel's budget is a hard cap of its own (a
		// reload's new count applies to the tunnels that start after it).
		budget := cfg.buffers().TunnelBytes / uint64(max(1, len(e.config().Branches)))
		tc := e.tunnelConfig(cfg, b.Key, budget, log)
		tc.MaxUDPPayloadBytes = min(tunnel.MaxUDPPayloadBytesForMTU(cfg.Listen.Addr(), cfg.withDefaults().TunnelMTU), driver.HubMaxDatagramBytes) // IPv6's headers are larger; the hub's buffers hold the IPv4 size
		t, err := driver.Listen(ctx, driver.Config{Bind: bc, NoGate: true, Logger: log.With("sub", "driver"),
			Tunnel:     tc,
			OnDatagram: func(p []byte) { dgram.Demux(p, nil, b.far) }, Refusals: e.refusals})
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

// hubBranches returns the running branches (nil unless a hub).
func (e *Edge) hubBranches() []*branch {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.branches
}

// peerStatus is the status of each branch.
func (e *Edge) peerStatus() []control.Peer {
	var out []control.Peer
	for _, b := range e.hubBranches() {
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
