package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
)

// CPUTime is a process's user and system CPU time and its threads' context
// switches, summed over the threads alive when read: Wakeups the voluntary
// ones (steadier than CPU seconds), Preemptions the involuntary ones.
type CPUTime struct {
	User, System         time.Duration
	Wakeups, Preemptions uint64
}

// Total is user plus system time.
func (c CPUTime) Total() time.Duration { return c.User + c.System }

// Sub is the CPU time used, and the switches made, between b and c.
func (c CPUTime) Sub(b CPUTime) CPUTime {
	return CPUTime{User: c.User - b.User, System: c.System - b.System,
		Wakeups: c.Wakeups - min(b.Wakeups, c.Wakeups), Preemptions: c.Preemptions - min(b.Preemptions, c.Preemptions)}
}

// CPUTimes returns the CPU time each edge's process has used so far, read
// from /proc ('ip netns exec' execs the edge, so the PID is wanopt's).
func (e *Edges) CPUTimes() (near, far CPUTime, err error) {
	if near, err = e.near.cpuTime(); err != nil {
		return CPUTime{}, CPUTime{}, err
	}
	if far, err = e.far.cpuTime(); err != nil {
		return CPUTime{}, CPUTime{}, err
	}
	return near, far, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's utime and stime:
// 100 on every Linux architecture.
const clockTicks = 100

func (p *edgeProc) cpuTime() (CPUTime, error) {
	if p == nil || p.cmd.Process == nil {
		return CPUTime{}, errors.New("edge not started")
	}
	return procCPUTime(p.cmd.Process.Pid)
}

// procCPUTime reads utime and stime of a process from /proc/PID/stat,
// and its threads' context switches from /proc/PID/task/*/status.
func procCPUTime(pid int) (CPUTime, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return CPUTime{}, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	c, err := parseProcStat(pid, string(b))
	if err != nil {
		return CPUTime{}, err
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return CPUTime{}, fmt.Errorf("threads of process %d: %w", pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended since the listing
		}
		if err != nil {
			return CPUTime{}, fmt.Errorf("context switches of process %d: %w", pid, err)
		}
		vol, invol, err := parseSwitches(string(b))
		if err != nil {
			return CPUTime{}, fmt.Errorf("context switches of thread %s of process %d: %w", t.Name(), pid, err)
		}
		c.Wakeups += vol
		c.Preemptions += invol
	}
	return c, nil
}

// parseSwitches reads voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches from the text of /proc/PID/task/TID/status.
func parseSwitches(status string) (vol, invol uint64, err error) {
	var found int
	for line := range strings.Lines(status) {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch name {
		case "voluntary_ctxt_switches":
			dst = &vol
		case "nonvoluntary_ctxt_switches":
			dst = &invol
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSpace(value), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", name, err)
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("no voluntary_ctxt_switches and nonvoluntary_ctxt_switches lines")
	}
	return vol, invol, nil
}

// parseProcStat reads utime and stime from the text of /proc/PID/stat.
func parseProcStat(pid int, s string) (CPUTime, error) {
	// The command name (field 2) is in parentheses and may hold spaces:
	// count the fields after its closing parenthesis.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return CPUTime{}, fmt.Errorf("CPU time of process %d: unexpected /proc/%d/stat %q", pid, pid, tail(s, 200))
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return CPUTime{}, fmt.Errorf("CPU time of process %d: short /proc/%d/stat", pid, pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return CPUTime{}, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	return CPUTime{User: time.Duration(ut) * time.Second / clockTicks, System: time.Duration(st) * time.Second / clockTicks}, nil
}

// Memory is a process's resident memory from /proc/PID/status: now (VmRSS)
// and its peak since start (VmHWM), in bytes.
type Memory struct {
	RSSBytes, PeakBytes uint64
}

// Memory reads the resident memory of the "near" or "far" edge's process.
func (e *Edges) Memory(side string) (Memory, error) {
	p := e.near
	if side == "far" {
		p = e.far
	}
	if p == nil || p.cmd.Process == nil {
		return Memory{}, fmt.Errorf("%s edge not started", side)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return Memory{}, fmt.Errorf("memory of the %s edge: %w", side, err)
	}
	return parseProcStatus(string(b))
}

// parseProcStatus reads VmRSS and VmHWM (in kB) from /proc/PID/status.
func parseProcStatus(s string) (Memory, error) {
	var m Memory
	var seen int
	for _, line := range strings.Split(s, "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("unexpected %s line %q in /proc/PID/status", name, line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%s in /proc/PID/status: %w", name, err)
		}
		if name == "VmRSS" {
			m.RSSBytes = kb << 10
		} else {
			m.PeakBytes = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return Memory{}, errors.New("no VmRSS and VmHWM in /proc/PID/status")
	}
	return m, nil
}

// TCPExtCounter reads one TcpExt counter of h's namespace.
func TCPExtCounter(ctx context.Context, l *lab.Lab, h *lab.Host, name string) (uint64, error) {
	out, err := l.Command(ctx, h, "cat", "/proc/net/netstat").Output()
	if err != nil {
		return 0, fmt.Errorf("read /proc/net/netstat in %s: %w", h.NS, err)
	}
	return parseTCPExt(string(out), name)
}

// parseTCPExt finds the TcpExt counter name in /proc/net/netstat's text.
func parseTCPExt(text, name string) (uint64, error) {
	if v, ok := ProcNetCounters(text, "TcpExt")[name]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("no TcpExt counter %s in /proc/net/netstat (is this Linux?)", name)
}

// ProcNetCounters returns the counters of group ("TcpExt", "Udp", ...)
// in the text of /proc/net/netstat or /proc/net/snmp.
func ProcNetCounters(text, group string) map[string]uint64 {
	m := map[string]uint64{}
	var names []string
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != group+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, v := range f[1:] {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && i < len(names) {
				m[names[i]] = n
			}
		}
		break
	}
	return m
}
