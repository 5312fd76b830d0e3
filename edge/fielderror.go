package edge

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrConfig marks a configuration the edge refused.
var ErrConfig = errors.New("bad edge configuration")

// FieldError is a configuration refused for one field. Field names it
// (a configuration's field, e.g. "MemoryMiB"; "Upstreams.Routes" for a
// part of one); Text says what is wrong, with each field it involves
// written {Field}, or {Field PLACEHOLDER} where a command's word for the
// field takes a value. Error() names the fields as they are ("MemoryMiB 5:
// want 16 to 1048576"); a command names them in its own words with
// Render (cmd/wanopt: its flags). It wraps ErrConfig, or Err: what
// failed when the edge acted on the field (a TUN device it could not
// open).
type FieldError struct {
	Field string
	Text  string
	Err   error
}

// fieldRef is a field named in a FieldError's Text, with its placeholder.
var fieldRef = regexp.MustCompile(`\{([A-Z][A-Za-z.]*)(?: ([^{}]+))?\}`)

// Render is the error with every field named by name; a placeholder
// follows a field that name renames.
func (e *FieldError) Render(name func(field string) string) string {
	return fieldRef.ReplaceAllStringFunc(e.Text, func(m string) string {
		sub := fieldRef.FindStringSubmatch(m)
		n := name(sub[1])
		if n != sub[1] && sub[2] != "" {
			n += " " + sub[2]
		}
		return n
	})
}

func (e *FieldError) Error() string { return e.Render(fieldName) }

func (e *FieldError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrConfig
}

// fieldName names a field as it is.
func fieldName(field string) string { return field }

// bad is a FieldError for field, its Text formatted from format.
func bad(field, format string, a ...any) error {
	return &FieldError{Field: field, Text: fmt.Sprintf(format, a...)}
}

// failed is a FieldError for field of what failed, err.
func failed(field string, err error, format string, a ...any) error {
	return &FieldError{Field: field, Text: fmt.Sprintf(format, a...) + ": " + err.Error(), Err: err}
}

// Describe is err as an operator reads it: a FieldError with its fields
// named by name (nil: as they are), any other error as it is.
func Describe(err error, name func(field string) string) string {
	var fe *FieldError
	if name == nil || !errors.As(err, &fe) {
		return err.Error()
	}
	return fe.Render(name)
}
