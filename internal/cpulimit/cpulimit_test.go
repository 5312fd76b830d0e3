package cpulimit

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeTree writes a cgroup list, a mount table and the limit files under
// dir, and returns Files pointing at them.
func fakeTree(t *testing.T, cgroup, mountinfo string, files map[string]string) Files {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return Files{
		Cgroup:    write("cgroup", cgroup),
		MountInfo: write("mountinfo", replaceDir(mountinfo, dir)),
	}
}

func replaceDir(s, dir string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		if s[i] == '@' {
			out = append(out, dir...)
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

func TestLimit(t *testing.T) {
	const v1mounts = "31 23 0:28 / @ rw - tmpfs tmpfs rw\n32 31 0:29 / @/cpu rw,relatime - cgroup cgroup rw,cpu\n33 31 0:30 / @/cpuacct rw - cgroup cgroup rw,cpuacct\n"
	const v2mounts = "30 23 0:27 / @/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
	for _, tc := range []struct {
		name           string
		cgroup, mounts string
		files          map[string]string
		cpus           float64
		ok, wantErr    bool
		procs          int
	}{
		{
			name:   "v1 quarter core",
			cgroup: "9:name=systemd:/\n4:cpu:/wanbench/near\n3:cpuacct:/\n",
			mounts: v1mounts,
			files:  map[string]string{"cpu/wanbench/near/cpu.cfs_quota_us": "25000\n", "cpu/wanbench/near/cpu.cfs_period_us": "100000\n"},
			cpus:   0.25, ok: true, procs: 1,
		},
		{
			name:   "v1 no quota",
			cgroup: "4:cpu:/\n",
			mounts: v1mounts,
			files:  map[string]string{"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
			procs:  0,
		},
		{
			name:   "v1 cpu,cpuacct joined, two and a half cores",
			cgroup: "4:cpuacct,cpu:/svc\n",
			mounts: "32 31 0:29 / @/cpu,cpuacct rw - cgroup cgroup rw,cpuacct,cpu\n",
			files:  map[string]string{"cpu,cpuacct/svc/cpu.cfs_quota_us": "250000", "cpu,cpuacct/svc/cpu.cfs_period_us": "100000"},
			cpus:   2.5, ok: true, procs: 0,
		},
		{
			name:   "v2 one core",
			cgroup: "0::/system.slice/wanopt.service\n",
			mounts: v2mounts,
			files:  map[string]string{"unified/system.slice/wanopt.service/cpu.max": "100000 100000\n"},
			cpus:   1, ok: true, procs: 1,
		},
		{
			name:   "v2 in a cgroup namespace (mount root not /)",
			cgroup: "0::/system.slice/wanopt.service\n",
			mounts: "30 23 0:27 /system.slice @/unified rw - cgroup2 cgroup2 rw\n",
			files:  map[string]string{"unified/wanopt.service/cpu.max": "50000 100000\n"},
			cpus:   0.5, ok: true, procs: 1,
		},
		{
			name:   "v2 max",
			cgroup: "0::/a\n",
			mounts: v2mounts,
			files:  map[string]string{"unified/a/cpu.max": "max 100000\n"},
		},
		{
			name:   "v2 without the cpu controller",
			cgroup: "0::/a\n",
			mounts: v2mounts,
			files:  map[string]string{"unified/a/cgroup.procs": ""},
		},
		{
			name:    "v2 garbage",
			cgroup:  "0::/a\n",
			mounts:  v2mounts,
			files:   map[string]string{"unified/a/cpu.max": "lots\n"},
			wantErr: true,
		},
		{
			name:   "no cgroup mounted",
			cgroup: "0::/\n",
			mounts: "22 1 8:1 / / rw - ext4 /dev/root rw\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeTree(t, tc.cgroup, tc.mounts, tc.files)
			cpus, ok, err := f.Limit()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Limit: error %v, want error %v", err, tc.wantErr)
			}
			if cpus != tc.cpus || ok != tc.ok {
				t.Errorf("Limit = %g, %v; want %g, %v", cpus, ok, tc.cpus, tc.ok)
			}
			if p := Procs(cpus, ok); p != tc.procs {
				t.Errorf("Procs = %d, want %d", p, tc.procs)
			}
		})
	}
}

// TestSelf reads this process's own limit: it must not fail on the
// machine the tests run on.
func TestSelf(t *testing.T) {
	cpus, ok, err := Self.Limit()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this process's CPU limit: %g (limited: %v)", cpus, ok)
}

func TestAdaptiveProcs(t *testing.T) {
	for _, tc := range []struct {
		cpus    float64
		limited bool
		used    float64
		cur     int
		want    int
	}{
		{0.25, true, 0.25, 0, 1}, // held to a quarter core: one thread, whatever the use
		{1, true, 0.99, 1, 1},
		{0, false, 0, 0, 1},    // idle, unlimited: one thread
		{0, false, 0.2, 0, 1},  // 50 Mbit/s
		{0, false, 0.5, 0, 0},  // busy on the default: stays (inside the gap)
		{0, false, 0.5, 1, 1},  // busy on one thread: stays (inside the gap)
		{0, false, 0.69, 1, 1}, // near the edge of one thread
		{0, false, 0.95, 1, 0}, // one thread is not enough: Go's default
		{0, false, 0.34, 0, 1}, // load gone: back to one
		{2, true, 0.9, 1, 0},   // a two-CPU limit allows more than one
		{1.5, true, 0.1, 0, 1},
	} {
		if got := AdaptiveProcs(tc.cpus, tc.limited, tc.used, tc.cur); got != tc.want {
			t.Errorf("AdaptiveProcs(limit %v %v, used %v, now %d) = %d, want %d", tc.cpus, tc.limited, tc.used, tc.cur, got, tc.want)
		}
	}
}
