//go:build !linux

package stack

import (
	"context"
	"fmt"

	"github.com/wanopt/wanopt/flow"
)

// New returns an error: building a stack on a TUN fd is implemented on
// Linux only. NewWithEndpoint works everywhere.
func New(ctx context.Context, fd int, d flow.Dialer, cfg Config) (*Stack, error) {
	return nil, fmt.Errorf("stack: a stack on a TUN fd is implemented on Linux only; use NewWithEndpoint")
}
