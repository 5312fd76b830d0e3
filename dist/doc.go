// Package dist holds wanopt's packaging: the systemd units (systemd/), the
// sysusers.d file, a systemd-networkd TUN device and example configurations,
// which 'make install' installs. It has no Go code; its test installs the
// tree into a temporary directory and checks it (docs/guide/deploy.md is
// the guide).
package dist
