package cpuplace

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func cpus(list ...int) unix.CPUSet {
	var s unix.CPUSet
	for _, c := range list {
		s.Set(c)
	}
	return s
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		all        unix.CPUSet
		rest, last string
	}{
		{cpus(0, 1), "0", "1"},
		{cpus(0, 1, 2, 3), "0-2", "3"},
		{cpus(2, 5, 70), "2,5", "70"},
	} {
		rest, last, err := split(tc.all)
		if err != nil || Format(rest) != tc.rest || Format(last) != tc.last {
			t.Errorf("split(%s) = %s, %s, %v; want %s, %s", Format(tc.all), Format(rest), Format(last), err, tc.rest, tc.last)
		}
	}
	if _, _, err := split(cpus(3)); err == nil || !strings.Contains(err.Error(), "two CPUs") {
		t.Errorf("split of one CPU: %v, want an error that asks for two", err)
	}
}

func TestFormat(t *testing.T) {
	for set, want := range map[*unix.CPUSet]string{
		new(unix.CPUSet): "none", ptr(cpus(0)): "0", ptr(cpus(0, 1, 2, 5, 7, 8)): "0-2,5,7-8", ptr(cpus(127)): "127",
	} {
		if got := Format(*set); got != want {
			t.Errorf("Format = %q, want %q", got, want)
		}
	}
}

func ptr(s unix.CPUSet) *unix.CPUSet { return &s }

// allowed returns the Cpus_allowed_list line of a /proc/<pid>/status.
func allowed(t *testing.T, status string) string {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list in %q", status)
	return ""
}

// TestStartOnAndPinProcess starts a child on the last CPU while this
// process is pinned to the others, checks both, and unpins.
func TestStartOnAndPinProcess(t *testing.T) {
	rest, last, err := Split()
	if err != nil {
		t.Skipf("needs two CPUs: %v", err)
	}
	old, err := PinProcess(rest)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := PinProcess(old); err != nil {
			t.Fatal(err)
		}
	}()
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err == nil && got != rest {
			t.Errorf("thread %d runs on %s after PinProcess(%s)", tid, Format(got), Format(rest))
		}
	}
	cmd := exec.Command("cat", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	if err := StartOn(last, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := allowed(t, out.String()); got != Format(last) {
		t.Errorf("child started on %s runs on %s", Format(last), got)
	}
	self, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	if got := allowed(t, string(self)); got != Format(rest) {
		t.Errorf("after StartOn this thread runs on %s, want %s back", got, Format(rest))
	}
}
