// Package edge runs a wanopt edge in one of three roles, each built by its
// own constructor from its own configuration:
//
//   - a near edge (NewNear, NearConfig), the initiator: it dials one far
//     edge, or with Upstreams several, and carries the TCP it intercepts
//     on a TUN device (a gVisor netstack, package stack) to them through
//     the tunnel (package tunnel/driver), kept up with reconnects, a
//     bridge opening a tunnel stream for each flow (package ingress);
//   - a far edge (NewFar, FarConfig), the responder: it accepts one near
//     edge's tunnel and connects the flows its policy allows (package
//     egress), from kernel sockets or, with LAN.Transparent, through its
//     own TUN;
//   - a hub (NewHub, HubConfig): a far edge serving several near edges,
//     its branches, on one socket.
//
// Each configuration embeds Shared, what every role has (key, congestion
// control, timeouts, memory budget, policy, TUN device, control socket,
// metrics, logger, reload), and each role's type embeds one base: the
// memory plan (PlanMemory, made once at construction and handed to the
// flows' budget, the stack, the tunnels and, through Memory, the Go
// runtime's limit), the control socket (edge/control), the metrics
// (edge/metrics), readiness and the loop that keeps a tunnel up. Any
// edge, of either role, may intercept on a TUN and connect for its peer.
// Errors name the configuration's fields (FieldError); cmd/wanopt names
// them by its flags. Tests build edges the same way, in-process (an edge
// pair can talk over an in-memory bind: Shared.Bind).
//
//	e, err := edge.NewNear(cfg)
//	...
//	err = e.Run(ctx) // until ctx ends
package edge
