package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a unixgram socket as systemd's would be, named by a path in
// a temporary directory or in the abstract namespace.
func listen(t *testing.T, abstract bool) (name string, conn *net.UnixConn) {
	t.Helper()
	name = filepath.Join(t.TempDir(), "notify")
	if abstract {
		name = fmt.Sprintf("@wanopt-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return name, conn
}

// receive reads one datagram, or fails after a second.
func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("read the notification: %v", err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	tests := []struct {
		name        string
		abstract    bool
		assignments []string
		want        string
	}{
		{"ready", false, []string{Ready}, "READY=1\n"},
		{"ready and status", false, []string{Ready, Status("tunnel up")}, "READY=1\nSTATUS=tunnel up\n"},
		{"abstract socket", true, []string{Stopping, Status("stopping")}, "STOPPING=1\nSTATUS=stopping\n"},
		{"watchdog", true, []string{Watchdog}, "WATCHDOG=1\n"},
		{"status on one line", false, []string{Status("no answer\nREADY=1  from\t192.0.2.2:4500")}, "STATUS=no answer READY=1 from 192.0.2.2:4500\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, conn := listen(t, tt.abstract)
			t.Setenv("NOTIFY_SOCKET", name)
			n, err := FromEnv()
			if err != nil || n == nil {
				t.Fatalf("FromEnv with NOTIFY_SOCKET=%s: %v, %v", name, n, err)
			}
			if err := n.Notify(tt.assignments...); err != nil {
				t.Fatalf("Notify: %v", err)
			}
			if got := receive(t, conn); got != tt.want {
				t.Errorf("sent %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotifyErrors(t *testing.T) {
	t.Run("unset", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "")
		os.Unsetenv("NOTIFY_SOCKET")
		if n, err := FromEnv(); n != nil || err != nil {
			t.Errorf("FromEnv without NOTIFY_SOCKET = %v, %v; want nil, nil", n, err)
		}
	})
	for _, socket := range []string{"relative/path", "@", "vsock:2:1234"} {
		t.Run("socket "+socket, func(t *testing.T) {
			if _, err := New(socket); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
				t.Errorf("New(%q) = %v; want an error naming NOTIFY_SOCKET", socket, err)
			}
		})
	}
	t.Run("not an assignment", func(t *testing.T) {
		name, _ := listen(t, false)
		n, _ := New(name)
		for _, a := range []string{"READY", "=1", "READY=1\nSTATUS=x"} {
			if err := n.Notify(a); err == nil {
				t.Errorf("Notify(%q) sent it; want an error", a)
			}
		}
	})
	t.Run("no listener", func(t *testing.T) {
		n, _ := New(filepath.Join(t.TempDir(), "gone"))
		if err := n.Notify(Ready); err == nil {
			t.Error("Notify to a socket nobody listens on succeeded; want an error")
		}
	})
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		name      string
		usec, pid string // "" leaves the variable unset
		want      time.Duration
		wantErr   bool
	}{
		{"no watchdog", "", "", 0, false},
		{"for this process", "30000000", self, 30 * time.Second, false},
		{"no pid given", "500000", "", 500 * time.Millisecond, false},
		{"for another process", "30000000", strconv.Itoa(os.Getpid() + 1), 0, false},
		{"zero", "0", self, 0, true},
		{"not a number", "30s", self, 0, true},
		{"bad pid", "30000000", "init", 0, true},
		{"too large", "9223372036854775807", self, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range map[string]string{"WATCHDOG_USEC": tt.usec, "WATCHDOG_PID": tt.pid} {
				t.Setenv(k, v)
				if v == "" {
					os.Unsetenv(k)
				}
			}
			got, err := WatchdogInterval()
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("WatchdogInterval() = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
