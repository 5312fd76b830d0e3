package analyze

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrBadFilter is returned (wrapped) by ParseFilter.
var ErrBadFilter = errors.New("bad flow filter")

// Filter selects flows. Every term must match; an address or port term
// matches when either endpoint has it.
type Filter struct {
	terms []filterTerm
}

type filterTerm struct {
	id   int        // flow number, 0: any
	addr netip.Addr // invalid: any
	port uint16     // 0: any
}

// ParseFilter parses a comma-separated list of terms:
//
//	7               flow number 7 (as numbered in the report)
//	198.18.0.2      an endpoint address
//	198.18.0.2:5201 an endpoint address and port
//	[2001:db8::1]:80
//	:5201           an endpoint port
func ParseFilter(s string) (*Filter, error) {
	f := &Filter{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		t, err := parseTerm(part)
		if err != nil {
			return nil, err
		}
		f.terms = append(f.terms, t)
	}
	if len(f.terms) == 0 {
		return nil, fmt.Errorf("%w: %q is empty; give a flow number, ADDR, ADDR:PORT or :PORT", ErrBadFilter, s)
	}
	return f, nil
}

func parseTerm(p string) (filterTerm, error) {
	if n, err := strconv.Atoi(strings.TrimPrefix(p, "#")); err == nil && n > 0 {
		return filterTerm{id: n}, nil
	}
	if strings.HasPrefix(p, ":") {
		port, err := strconv.ParseUint(p[1:], 10, 16)
		if err != nil || port == 0 {
			return filterTerm{}, fmt.Errorf("%w: port in %q must be 1-65535", ErrBadFilter, p)
		}
		return filterTerm{port: uint16(port)}, nil
	}
	if ap, err := netip.ParseAddrPort(p); err == nil {
		return filterTerm{addr: ap.Addr().Unmap(), port: ap.Port()}, nil
	}
	if a, err := netip.ParseAddr(p); err == nil {
		return filterTerm{addr: a.Unmap()}, nil
	}
	return filterTerm{}, fmt.Errorf("%w: cannot parse %q; use a flow number, ADDR, ADDR:PORT, [V6ADDR]:PORT or :PORT", ErrBadFilter, p)
}

// Match reports whether flow number id between endpoints a and b is selected.
func (f *Filter) Match(id int, a, b netip.AddrPort) bool {
	for _, t := range f.terms {
		if !t.match(id, a) && !t.match(id, b) {
			return false
		}
	}
	return true
}

func (t filterTerm) match(id int, ep netip.AddrPort) bool {
	if t.id != 0 {
		return t.id == id
	}
	if t.addr.IsValid() && t.addr != ep.Addr().Unmap() {
		return false
	}
	return t.port == 0 || t.port == ep.Port()
}
