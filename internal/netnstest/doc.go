// Package netnstest gives tests network namespaces of their own: RequireRoot
// skips a test that cannot make them, New makes one that the test's cleanup
// deletes, and Do runs a function inside one. It is empty on systems other
// than Linux.
package netnstest
