package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/internal/version"
)

const versionSummary = `Print which build of wanopt this is: the module version (a release tag, a
pseudo-version, or (devel) for a build in a checkout), the commit it was
built from (with -dirty when the tree had uncommitted changes), and the Go
release and platform. 'wanopt --version' is the same.`

func versionFlags() *pflag.FlagSet {
	return pflag.NewFlagSet("version", pflag.ContinueOnError)
}

// runVersion is 'wanopt version' and 'wanopt --version'.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := versionFlags()
	if done, err := parseCommand(fs, "wanopt version", versionSummary, args, stdout); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q: version takes none", fs.Args())
	}
	rev := version.Revision()
	if rev == "unknown" {
		rev += " (the build recorded none: build in the git checkout, without -buildvcs=false)"
	}
	fmt.Fprintf(stdout, "wanopt %s\ncommit %s\n%s %s/%s\n", version.Version(), rev, version.GoVersion(), runtime.GOOS, runtime.GOARCH)
	return nil
}
