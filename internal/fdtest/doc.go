// Package fdtest inspects the file descriptors behind a syscall.RawConn in
// tests: Readable polls one without waiting. It is empty on systems other
// than Linux.
package fdtest
