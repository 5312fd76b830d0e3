package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/wanopt/wanopt/internal/nsenter"
)

// RequireRoot skips t unless it runs as root with ip(8) at hand.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces; CI runs as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) from iproute2 for network namespaces")
	}
}

var seq atomic.Int32

// New creates a network namespace named wost<pid>-<n>, unique on the
// machine while this process lives, and deletes it in t's cleanup. It
// skips t as RequireRoot does.
func New(t testing.TB) (name string, ns netns.NsHandle) {
	t.Helper()
	RequireRoot(t)
	name = fmt.Sprintf("wost%d-%d", os.Getpid(), seq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	ns, err := netns.GetFromName(name)
	if err != nil {
		exec.Command("ip", "netns", "del", name).Run()
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name, ns
}

// Do runs fn on an OS thread switched into ns; see nsenter.Do. Sockets and
// devices fn creates live in ns. fn runs on a goroutine of its own, so it
// may call t.Error but not t.Fatal.
func Do(ns netns.NsHandle, fn func() error) error {
	return nsenter.Do(ns, fn)
}
