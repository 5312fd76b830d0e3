package flow

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
)

// RelayOptions configure Relay. The zero value counts nothing and logs
// nothing.
type RelayOptions struct {
	// LANToWAN and WANToLAN count the bytes written each way.
	LANToWAN, WANToLAN *atomic.Uint64
	// HalfClosed, if set, is called when a direction ends cleanly (its
	// source's FIN passed on): lanToWAN says which.
	HalfClosed func(lanToWAN bool)
	// Log receives the flow's events at Debug level.
	Log *slog.Logger
}

// Relay copies lan's bytes to wan and wan's to lan until both directions
// have ended, then closes both ends and returns. lan is the end on this
// edge's side (the client's connection on the near edge, the server's on
// the far edge), wan the tunnel's. The rules, per direction src → dst:
//
//	event                              Relay does
//	src's EOF (its FIN)                dst.CloseWrite (a FIN); the other way goes on
//	dst.CloseWrite fails               reset both ends
//	reading src fails (RST, error)     reset both ends
//	writing dst fails                  reset both ends
//	ctx done                           reset both ends
//	both ways ended with a FIN         close both ends (gracefully)
//
// So a FIN travels end to end one direction at a time (a half-closed flow
// keeps working), and a RST or a failure anywhere becomes a RST at both
// ends at once: a client is never left waiting on a flow whose other half
// is gone. Resetting uses Abort; the tunnel's end is reset first, because
// resetting the LAN end wakes the other direction, and its teardown must
// not pass a FIN into the tunnel ahead of the reset.
func Relay(ctx context.Context, lan, wan Conn, o RelayOptions) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var once sync.Once
	resetBoth := func() {
		once.Do(func() {
			_ = Abort(wan)
			_ = Abort(lan)
		})
	}
	stop := context.AfterFunc(ctx, resetBoth)
	defer stop()

	direction := func(dst, src Conn, n *atomic.Uint64, lanToWAN bool, name string) {
		rerr, werr := copyAdaptive(dst, src, n)
		switch {
		case werr != nil:
			log.Debug(name+": write failed; resetting the flow", "err", werr)
			resetBoth()
		case rerr == io.EOF:
			if err := dst.CloseWrite(); err != nil {
				log.Debug(name+": passing the FIN on failed; resetting the flow", "err", err)
				resetBoth()
				return
			}
			if o.HalfClosed != nil {
				o.HalfClosed(lanToWAN)
			}
		default:
			log.Debug(name+": read ended; resetting the flow", "err", rerr)
			resetBoth()
		}
	}
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		direction(wan, lan, o.LANToWAN, true, "lan to wan")
	}()
	direction(lan, wan, o.WANToLAN, false, "wan to lan")
	<-upDone
	_ = wan.Close()
	_ = lan.Close()
}
