package main

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// runKeygen prints a new private key (base64, like WireGuard's) and, on
// standard error, its public key, so 'wanopt keygen > edge.key' keeps the
// secret in the file and shows what to give the peer.
func runKeygen(args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("keygen", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	k, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	fmt.Fprintln(stdout, k.Base64())
	fmt.Fprintf(stderr, "public key: %s\n", k.PublicKey().Base64())
	return nil
}

// runPubkey reads a private key on standard input and prints its public key.
func runPubkey(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: pubkey takes no arguments; pipe the private key in: wanopt pubkey < edge.key", errUsage)
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("read private key from standard input: %w", err)
	}
	k, err := crypt.ParsePrivateKey(strings.TrimSpace(line))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, k.PublicKey().Base64())
	return nil
}
