package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeHierarchy makes a directory laid out like the cgroup mount point,
// with the given control files, and lets rmdir remove the fake groups.
func fakeHierarchy(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := rmdir
	rmdir = os.RemoveAll
	t.Cleanup(func() { rmdir = old })
	return root
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGroupV1(t *testing.T) {
	root := fakeHierarchy(t, map[string]string{
		"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000", "cpu/cgroup.procs": "1\n",
	})
	c, err := New(root, "near", Limits{Cores: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "cpu", fmt.Sprintf("wanbench-%d-near", os.Getpid()))
	if c.Dir() != want {
		t.Fatalf("group %s, want %s", c.Dir(), want)
	}
	for file, v := range map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"} {
		if got := readFile(t, filepath.Join(want, file)); got != v {
			t.Errorf("%s = %q, want %q", file, got, v)
		}
	}
	if err := c.Add(4242); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(want, "cgroup.procs")); got != "4242" {
		t.Errorf("cgroup.procs = %q, want the added pid", got)
	}
	if _, err := New(root, "near", Limits{Cores: 0.5}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second group of the same name: %v, want an error saying it exists", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The process still listed went back to the root before the rmdir.
	if got := readFile(t, filepath.Join(root, "cpu", "cgroup.procs")); got != "4242" {
		t.Errorf("root cgroup.procs = %q, want 4242 moved back", got)
	}
	if _, err := os.Stat(want); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group not removed: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestGroupV2(t *testing.T) {
	root := fakeHierarchy(t, map[string]string{
		"cgroup.controllers": "cpuset cpu io memory pids\n", "cgroup.subtree_control": "", "cgroup.procs": "1\n",
	})
	c, err := New(root, "far", Limits{Cores: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != "+cpu" {
		t.Errorf("cgroup.subtree_control = %q, want +cpu written", got)
	}
	dir := filepath.Join(root, fmt.Sprintf("wanbench-%d-far", os.Getpid()))
	if got := readFile(t, filepath.Join(dir, "cpu.max")); got != "25000 100000" {
		t.Errorf("cpu.max = %q, want \"25000 100000\"", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
		t.Error("v1 quota written in a v2 group")
	}
	if err := c.Add(77); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "cgroup.procs")); got != "77" {
		t.Errorf("cgroup.procs = %q, want 77", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group not removed: %v", err)
	}

	// cpu already enabled for the children: subtree_control is left alone.
	root = fakeHierarchy(t, map[string]string{"cgroup.controllers": "cpu memory", "cgroup.subtree_control": "cpu memory\n"})
	c, err = New(root, "far", Limits{Cores: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != "cpu memory\n" {
		t.Errorf("cgroup.subtree_control rewritten: %q", got)
	}
	if got := readFile(t, filepath.Join(c.Dir(), "cpu.max")); got != "100000 100000" {
		t.Errorf("cpu.max = %q for 1 core", got)
	}
}

// TestGroupWeight: a weight alone writes cpu.shares (v1, on the 1024
// scale) or cpu.weight (v2) and no quota; with a cap as well, both.
func TestGroupWeight(t *testing.T) {
	root := fakeHierarchy(t, map[string]string{"cpu/cpu.cfs_quota_us": "-1", "cpu/cgroup.procs": ""})
	c, err := New(root, "near", Limits{Weight: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(c.Dir(), "cpu.shares")); got != "10240" {
		t.Errorf("v1 cpu.shares = %q, want 10240 for weight 1000", got)
	}
	if _, err := os.Stat(filepath.Join(c.Dir(), "cpu.cfs_quota_us")); err == nil {
		t.Error("v1: a quota written for a weight alone")
	}
	c.Close()
	c, err = New(root, "far", Limits{Cores: 0.5, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(c.Dir(), "cpu.shares")); got != "10" {
		t.Errorf("v1 cpu.shares = %q, want 10 for weight 1", got)
	}
	if got := readFile(t, filepath.Join(c.Dir(), "cpu.cfs_quota_us")); got != "50000" {
		t.Errorf("v1 cpu.cfs_quota_us = %q beside a weight, want 50000", got)
	}
	c.Close()

	root = fakeHierarchy(t, map[string]string{"cgroup.controllers": "cpu", "cgroup.subtree_control": "cpu"})
	c, err = New(root, "near", Limits{Weight: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := readFile(t, filepath.Join(c.Dir(), "cpu.weight")); got != "1000" {
		t.Errorf("v2 cpu.weight = %q, want 1000", got)
	}
	if _, err := os.Stat(filepath.Join(c.Dir(), "cpu.max")); err == nil {
		t.Error("v2: cpu.max written for a weight alone")
	}
}

func TestGroupNoController(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"nothing":     {},
		"v2 sans cpu": {"cgroup.controllers": "memory pids\n", "cgroup.subtree_control": ""},
		// v1's cpu hierarchy without CFS bandwidth control (no quota file).
		"v1 sans quota": {"cpu/cpu.shares": "1024", "unified/cgroup.controllers": "hugetlb"},
	} {
		root := fakeHierarchy(t, files)
		_, err := New(root, "near", Limits{Cores: 0.5})
		if !errors.Is(err, ErrNoController) {
			t.Errorf("%s: %v, want the missing-controller error", name, err)
			continue
		}
		for _, want := range []string{filepath.Join(root, "cgroup.controllers"), filepath.Join(root, "cpu", "cpu.cfs_quota_us"), "mount"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not mention %q", name, err, want)
			}
		}
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				t.Errorf("%s: created %s anyway", name, e.Name())
			}
		}
	}
}

func TestGroupBadArguments(t *testing.T) {
	root := fakeHierarchy(t, map[string]string{"cpu/cpu.cfs_quota_us": "-1"})
	for _, cores := range []float64{-1, math.NaN(), math.Inf(1), 0.001} {
		if _, err := New(root, "near", Limits{Cores: cores}); err == nil {
			t.Errorf("%v cores: no error", cores)
		}
	}
	for _, w := range []int{-1, maxWeight + 1} {
		if _, err := New(root, "near", Limits{Weight: w}); err == nil {
			t.Errorf("weight %d: no error", w)
		}
	}
	for _, label := range []string{"", "../x", "a/b"} {
		if _, err := New(root, label, Limits{Cores: 0.5}); err == nil {
			t.Errorf("label %q: no error", label)
		}
	}
}

// TestGroupRemovesLeftovers: only the groups of a dead bench go.
func TestGroupRemovesLeftovers(t *testing.T) {
	root := fakeHierarchy(t, map[string]string{
		"cpu/cpu.cfs_quota_us": "-1",
		"cpu/cgroup.procs":     "1\n",
		// 2^31-2 is above any pid_max: that bench is dead.
		"cpu/wanbench-2147483646-near/cgroup.procs":                    "",
		fmt.Sprintf("cpu/wanbench-%d-other/cgroup.procs", os.Getpid()): "",
		"cpu/wanbench-1-near/cgroup.procs":                             "", // init is alive
		"cpu/someone-else/cgroup.procs":                                "",
	})
	c, err := New(root, "near", Limits{Cores: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for dir, want := range map[string]bool{
		"wanbench-2147483646-near":                    false,
		fmt.Sprintf("wanbench-%d-other", os.Getpid()): true,
		"wanbench-1-near":                             true,
		"someone-else":                                true,
	} {
		_, err := os.Stat(filepath.Join(root, "cpu", dir))
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v", dir, got, want)
		}
	}
}

// TestGroupCapHoldsBusyLoop caps a busy loop at 0.2 cores on the real CPU
// controller: it must use 0.1-0.3 CPU-s per second; Close removes the group.
func TestGroupCapHoldsBusyLoop(t *testing.T) {
	c := realGroup(t, "test-busy", Limits{Cores: 0.2})
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := c.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if cg := readFile(t, fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid)); !strings.Contains(cg, "/"+filepath.Base(c.Dir())+"\n") {
		t.Fatalf("the loop is not in %s:\n%s", c.Dir(), cg)
	}
	cpu0, t0 := procCPU(t, cmd.Process.Pid), time.Now()
	time.Sleep(1500 * time.Millisecond)
	cpu1, wall := procCPU(t, cmd.Process.Pid), time.Since(t0)
	rate := (cpu1 - cpu0).Seconds() / wall.Seconds()
	t.Logf("capped at 0.2 cores, the loop used %.3f CPU-s in %.2f s: %.3f per second", (cpu1 - cpu0).Seconds(), wall.Seconds(), rate)
	if rate < 0.1 || rate > 0.3 {
		t.Errorf("the loop used %.3f CPU-seconds per second, want 0.1-0.3 under a 0.2-core cap", rate)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group %s still there after Close: %v", c.Dir(), err)
	}
}

// procCPU is a process's utime + stime, from /proc/PID/stat (in clock
// ticks of 1/100 s, USER_HZ on Linux).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	s := readFile(t, fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// TestGroupWeightWins runs two busy loops on one CPU, one in a group of
// weight 1000 and one in this test's group (100): the first must take
// most of that CPU (ideally 1000/1100), and both must run.
func TestGroupWeightWins(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("skipping: taskset (util-linux) is not installed")
	}
	c := realGroup(t, "test-weight", Limits{Weight: 1000})
	loop := func() *exec.Cmd {
		cmd := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	heavy, plain := loop(), loop()
	if err := c.Add(heavy.Process.Pid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // taskset has exec'd sh by now
	h0, p0 := procCPU(t, heavy.Process.Pid), procCPU(t, plain.Process.Pid)
	time.Sleep(2 * time.Second)
	h1, p1 := procCPU(t, heavy.Process.Pid), procCPU(t, plain.Process.Pid)
	h, p := (h1 - h0).Seconds(), (p1 - p0).Seconds()
	share := h / (h + p)
	t.Logf("on one CPU for 2 s: the loop of weight 1000 took %.2f CPU-s, the other %.2f: a share of %.2f", h, p, share)
	if h+p < 0.5 || share < 0.75 || p == 0 {
		t.Errorf("the weighted loop took %.2f CPU-s and the other %.2f (share %.2f), want a share of at least 0.75 and both running", h, p, share)
	}
}

// realGroup creates a group of limits l on the machine's CPU controller,
// removed when the test ends; it skips without root or the controller.
func realGroup(t *testing.T, label string, l Limits) *Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: creating cgroups needs root (run 'sudo make test')")
	}
	c, err := New(Root, label, l)
	if errors.Is(err, ErrNoController) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
