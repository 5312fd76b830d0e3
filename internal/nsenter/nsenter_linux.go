package nsenter

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// errGoexit reports that fn did not return: it called runtime.Goexit, as
// t.FailNow and t.Skip do.
var errGoexit = errors.New("the function run in the network namespace did not return (runtime.Goexit: t.FailNow or t.Skip?)")

// Do runs fn on a goroutine of its own, locked to an OS thread switched
// into the network namespace ns, and returns fn's error. The thread is
// switched back afterwards; if that fails it stays locked, and the runtime
// discards it with the goroutine rather than reuse a thread in the wrong
// namespace. Either way what fn created is unaffected. Goroutines fn starts
// run in the process's own namespace, not in ns.
func Do(ns netns.NsHandle, fn func() error) error {
	return do(ns, "", fn)
}

// DoNamed is Do in the namespace that ip-netns(8) calls name.
func DoNamed(name string, fn func() error) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open network namespace %q: %w (was it created? run as root)", name, err)
	}
	defer ns.Close()
	return do(ns, fmt.Sprintf(" %q", name), fn)
}

// do is Do; name, if not empty, names the namespace in errors.
func do(ns netns.NsHandle, name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("read the current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace%s: %w (needs CAP_SYS_ADMIN: run as root)", name, err)
			return
		}
		returned := false
		defer func() {
			if !returned { // the thread, still in ns, goes with the goroutine
				errc <- errGoexit
			}
		}()
		ferr := fn()
		returned = true
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}
