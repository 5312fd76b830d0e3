package control

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"
)

// Query sends req to the control socket at path and decodes the answer
// into v. An answer {"error": "..."} is returned as an error.
func Query(path, req string, v any) error {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return fmt.Errorf("connect to the edge's control socket: %w (is 'wanopt run --control %s' running, and may you open the socket?)", err, path)
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
