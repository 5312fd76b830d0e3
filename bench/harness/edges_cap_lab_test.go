package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/bench/cgroup"
	"github.com/wanopt/wanopt/bench/cpuplace"
	"github.com/wanopt/wanopt/bench/harness/labtest"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// TestEdgesCPUCapInLab starts wanopt edges capped at 0.3 CPUs, weight 1000:
// each must sit in its own such group, and Stop must remove both.
func TestEdgesCPUCapInLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab creates network namespaces and cgroups and needs root (run 'sudo make test')")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: ip is not installed (apt-get install iproute2)")
	}
	if err := CheckEdgeCPU(0.3, 1000); errors.Is(err, cgroup.ErrNoController) {
		t.Skipf("skipping: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	wanopt := filepath.Join(labtest.BuildCommands(t, "wanopt"), "wanopt")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 5 * time.Millisecond}
	l := labtest.NewLab(t, ctx, lab.Edges, link, link)
	e, err := StartEdges(ctx, l, EdgeOptions{Wanopt: wanopt, Allow: []string{l.Server.Addr.String() + "/32:5001"}, EdgeCPU: 0.3, EdgeWeight: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if len(e.groups) != 2 {
		t.Fatalf("%d cgroups, want one per edge", len(e.groups))
	}
	for i, p := range []*edgeProc{e.far, e.near} { // the order StartEdges starts them in
		dir := e.groups[i].Dir()
		if want := fmt.Sprintf("wanbench-%d-%s", os.Getpid(), p.name); filepath.Base(dir) != want {
			t.Errorf("%s edge's group %s, want %s", p.name, dir, want)
		}
		pid := p.cmd.Process.Pid
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "wanopt" {
			t.Errorf("%s edge's process %d is %q, want wanopt itself", p.name, pid, strings.TrimSpace(string(comm)))
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(cg), ":/"+filepath.Base(dir)+"\n") {
			t.Errorf("%s edge (pid %d) is not in %s:\n%s", p.name, pid, dir, cg)
		}
		// All its threads are there too.
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			tcg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/cgroup", pid, task.Name()))
			if !strings.Contains(string(tcg), ":/"+filepath.Base(dir)+"\n") {
				t.Errorf("%s edge's thread %s is not in %s:\n%s", p.name, task.Name(), dir, tcg)
			}
		}
		quota, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		if errors.Is(err, fs.ErrNotExist) {
			quota, err = os.ReadFile(filepath.Join(dir, "cpu.max"))
		}
		if q := strings.Fields(string(quota)); err != nil || len(q) == 0 || q[0] != "30000" {
			t.Errorf("%s edge's quota %q (%v), want 30000 µs per 100 ms", p.name, quota, err)
		}
		weight, err := os.ReadFile(filepath.Join(dir, "cpu.shares"))
		want := "10240" // v1's scale
		if errors.Is(err, fs.ErrNotExist) {
			weight, err = os.ReadFile(filepath.Join(dir, "cpu.weight"))
			want = "1000"
		}
		if w := strings.TrimSpace(string(weight)); err != nil || w != want {
			t.Errorf("%s edge's weight %q (%v), want %s", p.name, w, err, want)
		}
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.groups {
		if _, err := os.Stat(c.Dir()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("group %s still there after Stop: %v", c.Dir(), err)
		}
	}
}

// TestEdgesOnCPUsInLab starts a pair of wanopt edges on the last CPU (as
// --edges-apart does): every thread of each must be allowed that CPU only.
func TestEdgesOnCPUsInLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab creates network namespaces and needs root (run 'sudo make test')")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: ip is not installed (apt-get install iproute2)")
	}
	_, last, err := cpuplace.Split()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	wanopt := filepath.Join(labtest.BuildCommands(t, "wanopt"), "wanopt")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 5 * time.Millisecond}
	l := labtest.NewLab(t, ctx, lab.Edges, link, link)
	e, err := StartEdges(ctx, l, EdgeOptions{Wanopt: wanopt, Allow: []string{l.Server.Addr.String() + "/32:5001"}, CPUs: last})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	for _, p := range []*edgeProc{e.far, e.near} {
		pid := p.cmd.Process.Pid
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil || len(tasks) < 2 {
			t.Fatalf("%s edge (pid %d): %d threads (%v); want a Go program's several", p.name, pid, len(tasks), err)
		}
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			var got unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &got); err != nil || got != last {
				t.Errorf("%s edge's thread %d may run on CPUs %s (%v), want %s", p.name, tid, cpuplace.Format(got), err, cpuplace.Format(last))
			}
		}
	}
}
