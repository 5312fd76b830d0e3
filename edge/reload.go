package edge

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/wanopt/wanopt/tunnel/driver"
)

// reloadable are the fields a reload applies, and those it ignores (not
// configuration: how the edge was built); a change to any other field
// needs a restart.
var reloadable = map[string]bool{"Policy": true, "NearRules": true, "Branches": true, "Upstreams": true, "HubRateBps": true,
	"Bind": false, "Reload": false, "Logger": false, "Resolver": false, "FieldName": false}

// refusal is a refused reload: what the operator reads, and the error
// behind it.
type refusal struct {
	msg string
	err error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.err }

// refusedStays is how a refused reload's reason begins.
const refusedStays = "reload refused, the running configuration stays: "

// readAgain reads the configuration again (Shared.Reload) for a running
// edge whose configuration is cur, and returns it with its defaults, or
// why it is refused: it does not validate, it is another role's, or it
// changes a field only a restart can change (restart adds the names of
// what else does). fix, if set, adjusts it before the comparison. Errors
// name the fields by Shared.FieldName.
func readAgain[T Config](b *base, cur T, fix func(T) T, restart func(T) []string) (T, error) {
	var zero T
	name := b.sh.FieldName
	if b.sh.Reload == nil {
		return zero, errors.New("reload refused: this edge was not started from a configuration it can read again")
	}
	read, err := b.sh.Reload()
	if err != nil {
		return zero, &refusal{refusedStays + err.Error(), err}
	}
	next, ok := sameRole[T](read)
	if !ok {
		return zero, errors.New(refusedStays + "the edge's role (near edge, far edge or hub) cannot change without a restart")
	}
	next = next.defaulted().(T)
	if err := next.validate(); err != nil {
		return zero, &refusal{refusedStays + Describe(err, name), err}
	}
	if fix != nil {
		next = fix(next)
	}
	var names []string
	have := map[string]reflect.Value{}
	eachField(reflect.ValueOf(cur), func(field string, v reflect.Value) { have[field] = v })
	eachField(reflect.ValueOf(next), func(field string, v reflect.Value) {
		if _, ok := reloadable[field]; ok {
			return
		}
		if n := name(field); !reflect.DeepEqual(have[field].Interface(), v.Interface()) && !slices.Contains(names, n) {
			names = append(names, n)
		}
	})
	if restart != nil {
		names = append(names, restart(next)...)
	}
	if len(names) > 0 {
		return zero, fmt.Errorf("%s%s cannot change without a restart", refusedStays, strings.Join(names, ", "))
	}
	return next, nil
}

// sameRole returns c as a T (given as a T or a *T).
func sameRole[T Config](c Config) (T, bool) {
	if v, ok := c.(T); ok {
		return v, true
	}
	if rv := reflect.ValueOf(c); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		v, ok := rv.Elem().Interface().(T)
		return v, ok
	}
	var zero T
	return zero, false
}

// eachField calls f with each field of the struct v, those of embedded
// structs as its own.
func eachField(v reflect.Value, f func(name string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			eachField(v.Field(i), f)
			continue
		}
		f(sf.Name, v.Field(i))
	}
}

// reloadEndpoint applies next's policy and near rules to a running near
// or far edge whose configuration was cur, and returns what changed.
func (p *endpoint) reloadEndpoint(cur, next Shared) (changed []string) {
	if cur.Policy.String() != next.Policy.String() {
		if eg := p.egress(); eg != nil {
			eg.SetPolicy(next.Policy)
		}
		changed = append(changed, fmt.Sprintf("egress policy: %s", next.Policy))
	}
	if cur.NearRules.String() != next.NearRules.String() {
		if p.near != nil {
			p.near.SetRules(next.NearRules)
		}
		changed = append(changed, "near rules: "+next.NearRules.String())
		if next.NearRules.HasTCPPass() && !cur.NearRules.HasTCPPass() {
			p.log.Warn(PassTCPWarning)
		}
	}
	return changed
}

// logReloaded logs what a reload changed.
func (b *base) logReloaded(changed []string) {
	if len(changed) == 0 {
		b.log.Info("configuration reloaded: nothing changed")
	} else {
		b.log.Info("configuration reloaded", "changed", strings.Join(changed, "; "))
	}
}

// bind opens the tunnel's socket with Shared.Bind, if set, into dc.
func (b *base) bind(dc *driver.Config) error {
	if b.sh.Bind == nil {
		return nil
	}
	c, err := b.sh.Bind()
	if err != nil {
		return fmt.Errorf("open the tunnel's socket: %w", err)
	}
	dc.Bind = c
	return nil
}
