package harness

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
)

// File is one file a fetch expects: its name on the server, its size and
// its SHA-256 (hex).
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// FileTiming is curl's account of one file: its connection (from 0) and,
// from its request, time_starttransfer and time_total.
type FileTiming struct {
	Name   string  `json:"name"`
	Conn   int     `json:"conn"`
	FirstS float64 `json:"first_byte_s"`
	TotalS float64 `json:"total_s"`
}

// FetchResult is one Fetch.
type FetchResult struct {
	// Seconds is the wall time from starting curl (all at once with
	// several connections) until the last one exited.
	Seconds float64
	// Connections is the TCP connections curl opened: one per chain when
	// keep-alive held.
	Connections int
	// Files are curl's timings of each file, in request order.
	Files []FileTiming
}

// Fetch downloads chains of files from the lab's server on port with curl
// on the client, one curl (one keep-alive connection) per chain, all at
// once, and checks that every file arrived whole over one connection each.
func Fetch(ctx context.Context, l *lab.Lab, port int, chains [][]File, timeout time.Duration) (FetchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// tmpfs, so that writing the files costs no disk time.
	dir, err := os.MkdirTemp("/dev/shm", "wanbench-fetch-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "wanbench-fetch-"); err != nil {
			return FetchResult{}, fmt.Errorf("folder for the fetched files: %w", err)
		}
	}
	defer os.RemoveAll(dir)
	conns := len(chains)
	cmds := make([]*exec.Cmd, len(chains))
	outs := make([]*strings.Builder, len(chains))
	errs := make([]*strings.Builder, len(chains))
	for i, chain := range chains {
		args := []string{"curl", "--http1.1", "--silent", "--show-error", "--fail", "--noproxy", "*",
			"--output-dir", dir, "--remote-name-all", "--write-out", "%{http_code} %{size_download} %{num_connects} %{time_starttransfer} %{time_total} %{url_effective}\\n"}
		for _, file := range chain {
			args = append(args, fmt.Sprintf("http://%s:%d/%s", l.Server.Addr, port, file.Name))
		}
		cmds[i] = l.Command(ctx, l.Client, args...)
		outs[i], errs[i] = &strings.Builder{}, &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], errs[i]
	}
	start := time.Now()
	for i, c := range cmds {
		if err := c.Start(); err != nil {
			for _, started := range cmds[:i] {
				_ = syscall.Kill(-started.Process.Pid, syscall.SIGKILL)
				_ = started.Wait()
			}
			return FetchResult{}, fmt.Errorf("start curl in %s: %w", l.Client.NS, err)
		}
	}
	var waitErrs []error
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			waitErrs = append(waitErrs, fmt.Errorf("curl (connection %d of %d): %w: %s", i+1, conns, err, strings.TrimSpace(errs[i].String())))
		}
	}
	run := FetchResult{Seconds: time.Since(start).Seconds()}
	if err := errors.Join(waitErrs...); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done within %v: %w", timeout, err)
		}
		return run, err
	}
	for i, chain := range chains {
		n, timings, err := checkCurlReport(outs[i].String(), chain)
		if err != nil {
			return run, fmt.Errorf("connection %d of %d: %w", i+1, conns, err)
		}
		if n != 1 {
			return run, fmt.Errorf("connection %d of %d: curl opened %d TCP connections for its %d files, want one kept alive", i+1, conns, n, len(chain))
		}
		run.Connections += n
		for _, t := range timings {
			t.Conn = i
			run.Files = append(run.Files, t)
		}
	}
	return run, VerifyFiles(dir, slices.Concat(chains...))
}

// checkCurlReport checks each file's status and size in curl's --write-out
// lines ("code size connects first-byte-s total-s url"); it returns the
// connections curl opened and each file's timings.
func checkCurlReport(out string, files []File) (connects int, timings []FileTiming, err error) {
	want := map[string]int64{}
	for _, f := range files {
		want[f.Name] = f.Size
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 {
			return 0, nil, fmt.Errorf("unexpected curl report line %q", sc.Text())
		}
		name := fields[5][strings.LastIndexByte(fields[5], '/')+1:]
		size, ok := want[name]
		if !ok {
			return 0, nil, fmt.Errorf("curl reports %s, which it was not asked for (or twice)", fields[5])
		}
		delete(want, name)
		got, err1 := strconv.ParseInt(fields[1], 10, 64)
		n, err2 := strconv.Atoi(fields[2])
		first, err3 := strconv.ParseFloat(fields[3], 64)
		total, err4 := strconv.ParseFloat(fields[4], 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return 0, nil, fmt.Errorf("curl report line %q: %w", sc.Text(), err)
		}
		if fields[0] != "200" || got != size {
			return 0, nil, fmt.Errorf("%s: HTTP %s, %d bytes; want 200 and %d bytes", name, fields[0], got, size)
		}
		connects += n
		timings = append(timings, FileTiming{Name: name, FirstS: first, TotalS: total})
	}
	if len(timings) != len(files) {
		return 0, nil, fmt.Errorf("curl reported %d of %d files", len(timings), len(files))
	}
	return connects, timings, nil
}

// VerifyFiles checks the SHA-256 of every file fetched into dir.
func VerifyFiles(dir string, files []File) error {
	for _, f := range files {
		r, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			return fmt.Errorf("fetched file: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("read fetched %s: %w", f.Name, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
			return fmt.Errorf("%s arrived damaged: SHA-256 %s, want %s", f.Name, got, f.SHA256)
		}
	}
	return nil
}

// Nginx is an nginx serving a folder from the lab's server.
type Nginx struct {
	cmd    *exec.Cmd
	exited chan struct{}
	stderr strings.Builder
}

// StartNginx runs nginx in the server's namespace on port, its files under
// prefix, serving root. It returns once nginx listens.
func StartNginx(ctx context.Context, l *lab.Lab, prefix, root string, port int) (*Nginx, error) {
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(prefix, root, netip.AddrPortFrom(l.Server.Addr, uint16(port)))), 0o644); err != nil {
		return nil, fmt.Errorf("write nginx's configuration: %w", err)
	}
	n := &Nginx{exited: make(chan struct{})}
	n.cmd = l.Command(ctx, l.Server, "nginx", "-p", prefix, "-c", conf, "-e", filepath.Join(prefix, "error.log"), "-g", "daemon off;")
	n.cmd.Stdout, n.cmd.Stderr = &n.stderr, &n.stderr
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx in %s: %w", l.Server.NS, err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	addr := fmt.Sprintf(":%d", port)
	for range 100 {
		out, _ := l.Command(ctx, l.Server, "ss", "-Htln", "sport = "+addr).Output()
		if strings.Contains(string(out), addr) {
			return n, nil
		}
		select {
		case <-n.exited:
			log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			return nil, fmt.Errorf("nginx in %s exited at start: %s%s", l.Server.NS, n.stderr.String(), tail(string(log), 1000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.Stop()
	return nil, fmt.Errorf("nginx in %s not listening on %s after 5 s", l.Server.NS, addr)
}

// Stop ends nginx and its workers (one process group).
func (n *Nginx) Stop() {
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
}

// nginxConf is the private configuration: one worker (root, to read any
// folder) serving static files with sendfile, unlimited keep-alive
// requests, every path under prefix.
func nginxConf(prefix, root string, listen netip.AddrPort) string {
	return fmt.Sprintf(`user root;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	default_type application/octet-stream;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000;
	keepalive_timeout 300s;
	client_body_temp_path %[1]s/tmp-body;
	proxy_temp_path %[1]s/tmp-proxy;
	fastcgi_temp_path %[1]s/tmp-fastcgi;
	uwsgi_temp_path %[1]s/tmp-uwsgi;
	scgi_temp_path %[1]s/tmp-scgi;
	server {
		listen %[3]s;
		root %[2]s;
	}
}
`, prefix, root, listen)
}
