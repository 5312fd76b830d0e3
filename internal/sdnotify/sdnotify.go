// Package sdnotify tells the service manager about the service's state:
// the sd_notify(3) protocol, in which a service started with Type=notify
// sends datagrams of newline-separated KEY=VALUE lines (READY=1,
// STATUS=..., STOPPING=1, WATCHDOG=1) to the unix socket named by
// $NOTIFY_SOCKET. A name starting with '@' is in the abstract namespace.
package sdnotify

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// The assignments the service manager acts on.
const (
	// Ready says start-up is finished: systemd ends the unit's start job,
	// and the units ordered after it start.
	Ready = "READY=1"
	// Stopping says the service is shutting down.
	Stopping = "STOPPING=1"
	// Watchdog is the keep-alive ping when the unit sets WatchdogSec=.
	Watchdog = "WATCHDOG=1"
)

// Status is the STATUS= assignment: a line 'systemctl status' shows. Line
// breaks become spaces, so that the text cannot add assignments of its own.
func Status(text string) string {
	return "STATUS=" + strings.Join(strings.Fields(text), " ")
}

// Notifier sends state to one notification socket. Its methods may be
// called from several goroutines.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns the notifier for $NOTIFY_SOCKET, or nil and no error when
// the variable is unset: the process was not started by systemd as a
// Type=notify service, and there is no one to tell.
func FromEnv() (*Notifier, error) {
	s, ok := os.LookupEnv("NOTIFY_SOCKET")
	if !ok || s == "" {
		return nil, nil
	}
	return New(s)
}

// New returns a notifier for the socket: an absolute path, or '@' and an
// abstract name.
func New(socket string) (*Notifier, error) {
	switch {
	case strings.HasPrefix(socket, "/"):
	case strings.HasPrefix(socket, "@") && len(socket) > 1:
		// Go's sockaddr conversion turns a leading '@' into the NUL of
		// an abstract name.
	default:
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: want an absolute path or an @abstract name (other address kinds, such as vsock, are not supported)", socket)
	}
	return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
}

// Notify sends the assignments in one datagram. A socket is opened for
// each message, so that a service manager that re-executed itself (and
// bound its socket again) still hears it.
func (n *Notifier) Notify(assignments ...string) error {
	if len(assignments) == 0 {
		return nil
	}
	for _, a := range assignments {
		if k, _, ok := strings.Cut(a, "="); !ok || k == "" || strings.ContainsAny(a, "\n") {
			return fmt.Errorf("sd_notify: %q is not one KEY=VALUE assignment", a)
		}
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(assignments, "\n") + "\n")); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// WatchdogInterval returns the interval the service manager expects
// WATCHDOG=1 within ($WATCHDOG_USEC), or 0 when it expects none: no
// WatchdogSec= on the unit, or $WATCHDOG_PID names another process (the
// variables were inherited, not meant for this one).
func WatchdogInterval() (time.Duration, error) {
	s, ok := os.LookupEnv("WATCHDOG_USEC")
	if !ok || s == "" {
		return 0, nil
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("WATCHDOG_PID=%q: not a process id", p)
		}
		if pid != os.Getpid() {
			return 0, nil
		}
	}
	usec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || usec <= 0 || usec > math.MaxInt64/int64(time.Microsecond) {
		return 0, errors.New("WATCHDOG_USEC=" + strconv.Quote(s) + ": want a positive number of microseconds")
	}
	return time.Duration(usec) * time.Microsecond, nil
}
