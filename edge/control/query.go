package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// Query sends req to the control socket at path and decodes the answer
// into v. An answer {"error": "..."} is returned as an error.
func Query(path, req string, v any) error {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		why := err.Error()
		switch {
		case errors.Is(err, syscall.ENOENT):
			why = "no such socket: is the edge running, with this control socket?"
		case errors.Is(err, syscall.ECONNREFUSED):
			why = "nobody answers (a socket left by an edge that stopped): is the edge running?"
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			why = "permission denied: ask as root or as a member of the socket's group"
		}
		return fmt.Errorf("cannot reach the edge's control socket %s: %s", path, why)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req+"\n"); err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	raw, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	var ce struct{ Error string }
	if json.Unmarshal(raw, &ce) == nil && ce.Error != "" {
		return fmt.Errorf("control socket %s: %s", path, ce.Error)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("control socket %s: bad answer: %w", path, err)
	}
	return nil
}
