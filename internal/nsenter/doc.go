// Package nsenter runs a function inside a Linux network namespace: the
// sockets and devices it creates belong to that namespace and stay usable
// from any goroutine afterwards. The lab (bench/lab) and the tests (through
// internal/netnstest) share it. It is empty on other systems.
package nsenter
