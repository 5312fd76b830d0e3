// Package cgroup holds processes to a share of the CPU with a cgroup: a
// bandwidth cap (v2 cpu.max, v1 cpu.cfs_quota_us) and a weight (v2
// cpu.weight, v1 cpu.shares), under whichever hierarchy the machine has.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where Linux mounts the cgroup hierarchies.
const Root = "/sys/fs/cgroup"

const (
	// periodUs is the CFS bandwidth period the quota is a share of: the
	// kernel's default, 100 ms.
	periodUs = 100_000
	// minQuotaUs is the smallest quota the kernel accepts (1 ms).
	minQuotaUs = 1000
	// defaultWeight is a group's CPU weight when unset (v2's cpu.weight;
	// v1's cpu.shares of 1024), and maxWeight the largest v2 accepts.
	defaultWeight = 100
	maxWeight     = 10000
	// prefix starts every group's name, "wanbench-<pid>-<label>": the pid
	// tells the groups of a bench that died from those of one that runs.
	prefix = "wanbench-"
)

var leftoverRE = regexp.MustCompile(`^` + prefix + `([0-9]+)-`)

// ErrNoController is New's error (wrapped) when neither cgroup hierarchy
// offers CPU-bandwidth control.
var ErrNoController = errors.New("no CPU-bandwidth controller")

// rmdir removes an empty group; a variable for the tests' fake hierarchy.
var rmdir = os.Remove

// Limits is what a group holds its processes to; the zero value, nothing
// (a group of the machine's defaults).
type Limits struct {
	// Cores, if positive, caps the group at that many CPUs: its quota of
	// CPU time per 100 ms period.
	Cores float64
	// Weight, if positive, is the group's CPU weight on cgroup v2's scale
	// (1 to 10000, default 100; v1 gets cpu.shares = Weight × 1024 / 100).
	// Contended CPUs are shared in proportion to weights; unlike Cores it
	// takes nothing while the CPUs are free.
	Weight int
}

func (l Limits) check() error {
	if math.IsNaN(l.Cores) || math.IsInf(l.Cores, 0) || l.Cores < 0 {
		return fmt.Errorf("CPU cap of %v cores: want 0 (no cap) or a positive number of CPUs", l.Cores)
	}
	if l.Cores > 0 && math.Round(l.Cores*periodUs) < minQuotaUs {
		return fmt.Errorf("CPU cap of %v cores: the kernel's smallest quota is %d µs per %d µs period (%.2f cores)",
			l.Cores, minQuotaUs, periodUs, float64(minQuotaUs)/periodUs)
	}
	if l.Weight < 0 || l.Weight > maxWeight {
		return fmt.Errorf("CPU weight %d: want 0 (none) or 1 to %d (%d is every group's default)", l.Weight, maxWeight, defaultWeight)
	}
	return nil
}

// Group is a cgroup holding its processes to its Limits; Close removes it.
type Group struct {
	dir    string // the group
	parent string // the hierarchy's root, where Close moves remaining processes
	closed bool
}

// New creates the group "wanbench-<pid>-<label>" under the CPU controller at
// root (normally Root), with cgroup v2 if it offers cpu, else v1, and sets
// its limits; with neither the error says what is missing. It first
// removes the empty groups of benches that have died.
func New(root, label string, l Limits) (*Group, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if label == "" || strings.ContainsAny(label, "/\x00") {
		return nil, fmt.Errorf("cgroup label %q: want a plain name", label)
	}
	parent, v2, err := findController(root)
	if err != nil {
		return nil, err
	}
	removeLeftovers(parent)
	if v2 {
		if err := enableCPU(parent); err != nil {
			return nil, err
		}
	}
	c := &Group{dir: filepath.Join(parent, fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), label)), parent: parent}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create cgroup %s: it already exists (left by an earlier group of this process?): remove it with rmdir", c.dir)
		}
		return nil, fmt.Errorf("create cgroup %s: %w%s", c.dir, err, rootHint(err))
	}
	if err := c.set(l, v2); err != nil {
		_ = rmdir(c.dir)
		return nil, err
	}
	return c, nil
}

// set writes l's limits into the group's control files.
func (c *Group) set(l Limits, v2 bool) error {
	quota := int64(math.Round(l.Cores * periodUs))
	switch {
	case l.Cores > 0 && v2:
		if err := write(c.dir, "cpu.max", fmt.Sprintf("%d %d", quota, periodUs)); err != nil {
			return err
		}
	case l.Cores > 0:
		// The period first: the quota is checked against it.
		if err := write(c.dir, "cpu.cfs_period_us", strconv.Itoa(periodUs)); err != nil {
			return err
		}
		if err := write(c.dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
	}
	switch {
	case l.Weight > 0 && v2:
		return write(c.dir, "cpu.weight", strconv.Itoa(l.Weight))
	case l.Weight > 0:
		// v1's shares are 1024 for the default weight of 100; the
		// kernel's least is 2.
		return write(c.dir, "cpu.shares", strconv.Itoa(max(2, l.Weight*1024/defaultWeight)))
	}
	return nil
}

// findController returns the directory of the hierarchy that has the cpu
// controller under root, and whether it is cgroup v2.
func findController(root string) (dir string, v2 bool, err error) {
	ctl, v2err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if v2err == nil && slices.Contains(strings.Fields(string(ctl)), "cpu") {
		return root, true, nil
	}
	v1 := filepath.Join(root, "cpu")
	_, v1err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us"))
	if v1err == nil {
		return v1, false, nil
	}
	v2state := "absent"
	if v2err == nil {
		v2state = fmt.Sprintf("lists %q, no cpu", strings.TrimSpace(string(ctl)))
	}
	return "", false, fmt.Errorf("%w under %s: cgroup v2 needs the cpu controller in %s (%s); cgroup v1 needs the cpu controller with CFS bandwidth control at %s (%v). Mount one (e.g. 'mkdir -p %s && mount -t cgroup -o cpu cgroup %s'), or run without the CPU cap or weight",
		ErrNoController, root, filepath.Join(root, "cgroup.controllers"), v2state, filepath.Join(v1, "cpu.cfs_quota_us"), v1err, v1, v1)
}

// enableCPU makes cgroup v2's cpu controller available to root's children
// (cpu.max exists only where the parent's subtree_control lists cpu).
func enableCPU(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(root, "cgroup.subtree_control"), err)
	}
	if slices.Contains(strings.Fields(string(b)), "cpu") {
		return nil
	}
	if err := write(root, "cgroup.subtree_control", "+cpu"); err != nil {
		return fmt.Errorf("enable the cpu controller for %s's children: %w (a cgroup with processes of its own cannot enable it: run from the hierarchy's root)", root, err)
	}
	return nil
}

// Dir is the group's directory.
func (c *Group) Dir() string { return c.dir }

// Add moves process pid, with all its threads, into the group. Threads and
// children it starts later are born in it.
func (c *Group) Add(pid int) error {
	if err := write(c.dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move process %d into cgroup %s: %w", pid, c.dir, err)
	}
	return nil
}

// Close moves processes still in the group back to the hierarchy's root
// and removes the group. It may be called again, also after an error.
func (c *Group) Close() error {
	if c == nil || c.closed {
		return nil
	}
	if err := emptyGroup(c.dir, c.parent); err != nil {
		return err
	}
	// A process that has just been reaped can keep the group busy for a
	// moment (cgroup v2 updates "populated" asynchronously).
	deadline := time.Now().Add(time.Second)
	for {
		err := rmdir(c.dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			c.closed = true
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w (its processes: %s)", c.dir, err, readProcs(c.dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// emptyGroup moves the processes listed in dir back to parent.
func emptyGroup(dir, parent string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the processes of cgroup %s: %w", dir, err)
	}
	for _, pid := range strings.Fields(string(b)) {
		// ESRCH: it exited meanwhile, which empties the group just as well.
		if err := write(parent, "cgroup.procs", pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("move process %s out of cgroup %s before removing it: %w", pid, dir, err)
		}
	}
	return nil
}

// removeLeftovers removes the groups of benches that have died. Groups of
// live processes are left alone; a failure leaves an empty group behind.
func removeLeftovers(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := leftoverRE.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if emptyGroup(dir, parent) == nil {
			_ = rmdir(dir)
		}
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func readProcs(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err.Error()
	}
	if s := strings.Join(strings.Fields(string(b)), " "); s != "" {
		return s
	}
	return "none"
}

// write writes one value to a control file. Each write(2) to a cgroup file
// is one command, so the value goes in one call.
func write(dir, file, value string) error {
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w%s", value, p, err, rootHint(err))
	}
	return nil
}

func rootHint(err error) string {
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return " (cgroups need root)"
	}
	return ""
}
