// Package version says which build of wanopt is running: the module
// version, the commit and the Go release, from the build information the
// Go toolchain embeds (runtime/debug.ReadBuildInfo). 'wanopt version' and
// the wanopt_build_info metric print them.
package version

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// info is read once: the build information does not change while the
// process runs.
var info = sync.OnceValue(func() (i struct{ version, revision string }) {
	i.version, i.revision = "(devel)", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if v := bi.Main.Version; v != "" {
		i.version = v
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && i.revision != "unknown" {
		// A binary built from a tree with uncommitted changes is not
		// that commit.
		i.revision += "-dirty"
	}
	return i
})

// Version is the main module's version: a release tag such as "v1.2.0",
// a pseudo-version for a build from a commit (go install ...@commit), or
// "(devel)" for a build in a checkout.
func Version() string { return info().version }

// Revision is the commit the binary was built from (with "-dirty" when
// the tree had uncommitted changes), or "unknown" when the build recorded
// none (go build -buildvcs=false, or outside a repository).
func Revision() string { return info().revision }

// GoVersion is the Go release that built the binary, e.g. "go1.26.3".
func GoVersion() string { return runtime.Version() }
