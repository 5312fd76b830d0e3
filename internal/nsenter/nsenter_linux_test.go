package nsenter_test

import (
	"errors"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/wanopt/wanopt/internal/netnstest"
	"github.com/wanopt/wanopt/internal/nsenter"
)

// TestDo runs functions in a fresh namespace: they see it (a loopback
// device only), their errors come back unchanged, and one that never
// returns (runtime.Goexit, as t.FailNow does) is an error, not a hang.
func TestDo(t *testing.T) {
	name, ns := netnstest.New(t)
	var ifs []net.Interface
	if err := nsenter.Do(ns, func() (err error) {
		ifs, err = net.Interfaces()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" {
		t.Errorf("interfaces in the new namespace: %v, want only lo", ifs)
	}
	errFn := errors.New("fn failed")
	if err := nsenter.DoNamed(name, func() error { return errFn }); err != errFn {
		t.Errorf("DoNamed returned %v, want fn's error unchanged", err)
	}
	if err := nsenter.DoNamed(name+"-none", func() error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DoNamed in a missing namespace: %v, want a not-exist error", err)
	}
	if err := nsenter.Do(ns, func() error { runtime.Goexit(); return nil }); !errors.Is(err, nsenter.ErrGoexit) {
		t.Errorf("fn called runtime.Goexit: Do returned %v, want ErrGoexit", err)
	}
}
