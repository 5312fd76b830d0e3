package main

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

const keygenSummary = `Make a new private key for an edge (base64, like WireGuard's keys) and
print its public key, the one to give the peer edge, on standard error. The
private key goes to standard output, or with --out to FILE, created with
mode 0600; an existing file is never overwritten.`

func keygenFlags() (*pflag.FlagSet, *string) {
	fs := pflag.NewFlagSet("keygen", pflag.ContinueOnError)
	out := fs.String("out", "", "write the private key to `FILE` (mode 0600) instead of standard output")
	return fs, out
}

// runKeygen writes a new private key (base64, like WireGuard's) to the file
// --out names, created with mode 0600 and never over an existing file, or
// prints it; on standard error it shows the public key, what to give the
// peer.
func runKeygen(args []string, stdout, stderr io.Writer) error {
	fs, out := keygenFlags()
	if done, err := parseCommand(fs, "wanopt keygen [--out FILE]", keygenSummary, args, stdout); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q: keygen takes only --out FILE", fs.Args())
	}
	k, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	if *out == "" {
		fmt.Fprintln(stdout, k.Base64())
	} else if err := writeKeyFile(*out, k); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "public key: %s\n", k.PublicKey().Base64())
	return nil
}

// writeKeyFile creates path with mode 0600 (failing if it exists) and
// writes k to it.
func writeKeyFile(path string, k crypt.PrivateKey) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("--out %s: the file exists; keygen never overwrites a key (remove it first if you mean to replace it)", path)
		}
		return fmt.Errorf("--out %s: %s", path, fileProblem(err))
	}
	if _, err := fmt.Fprintln(f, k.Base64()); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("--out %s: %s", path, fileProblem(err))
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("--out %s: %s", path, fileProblem(err))
	}
	return nil
}

// readKeyFile reads the private key in path. It refuses a file that group
// or others may read or write (OpenSSH's rule for private keys), and a
// --key that is itself a key rather than a file; no error shows the key.
func readKeyFile(path string) (crypt.PrivateKey, error) {
	if _, err := crypt.ParsePrivateKey(strings.TrimSpace(path)); err == nil {
		return crypt.PrivateKey{}, errors.New("--key takes the FILE that holds the private key, not the key itself (the command line is visible to every user of this host): write it with 'wanopt keygen --out FILE' and give that")
	}
	f, err := os.Open(path)
	if err != nil {
		return crypt.PrivateKey{}, fmt.Errorf("--key %s: %s (make one with 'wanopt keygen --out FILE')", path, fileProblem(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return crypt.PrivateKey{}, fmt.Errorf("--key %s: %s", path, fileProblem(err))
	}
	// A systemd credential (LoadCredential=) is root's, mode 0400, and the
	// service user reads it through an ACL entry, whose mask stat shows as
	// group read (0440): in $CREDENTIALS_DIRECTORY that bit is nobody's.
	loose := os.FileMode(0o077)
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" && filepath.Dir(filepath.Clean(path)) == filepath.Clean(dir) {
		loose = 0o037
	}
	if perm := fi.Mode().Perm(); perm&loose != 0 {
		return crypt.PrivateKey{}, fmt.Errorf("--key %s: the private key is accessible to others (mode %04o); make it private with 'chmod 600 %s'", path, perm, path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return crypt.PrivateKey{}, fmt.Errorf("--key %s: %s", path, fileProblem(err))
	}
	k, err := crypt.ParsePrivateKey(strings.TrimSpace(string(raw)))
	if err != nil {
		return crypt.PrivateKey{}, fmt.Errorf("--key %s: %v (the file must hold one base64 key from 'wanopt keygen')", path, err)
	}
	return k, nil
}

const pubkeySummary = `Print the public key of the private key read on standard input, e.g.
'wanopt pubkey < /etc/wanopt/near.key': the key the peer edge is given
(--peer-key, or the KEY of --branch and --upstream).`

func pubkeyFlags() *pflag.FlagSet { return pflag.NewFlagSet("pubkey", pflag.ContinueOnError) }

// runPubkey reads a private key on standard input and prints its public key.
func runPubkey(args []string, stdout, stderr io.Writer) error {
	fs := pubkeyFlags()
	if done, err := parseCommand(fs, "wanopt pubkey < FILE", pubkeySummary, args, stdout); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("pubkey takes no arguments; pipe the private key in: wanopt pubkey < edge.key")
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("read the private key from standard input: %s", fileProblem(err))
	}
	k, err := crypt.ParsePrivateKey(strings.TrimSpace(line))
	if err != nil {
		return fmt.Errorf("standard input: %w", err)
	}
	fmt.Fprintln(stdout, k.PublicKey().Base64())
	return nil
}
