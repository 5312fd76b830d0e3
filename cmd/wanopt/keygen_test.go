package main

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanopt/wanopt/tunnel/crypt"
)

func TestKeygen(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := dispatch([]string{"keygen"}, &out, &errOut); code != 0 {
		t.Fatalf("keygen exit %d: %s", code, errOut.String())
	}
	k, err := crypt.ParsePrivateKey(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("keygen printed %q: %v", out.String(), err)
	}
	if !strings.Contains(errOut.String(), k.PublicKey().Base64()) {
		t.Errorf("public key not shown: %q", errOut.String())
	}
	if strings.Contains(errOut.String(), k.Base64()) {
		t.Error("the private key leaked to standard error")
	}
}

// TestKeyFiles: keygen --out writes a 0600 file and never overwrites one;
// run refuses a key others may read, saying how to fix it, and a --key
// that is the key itself, without echoing it.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.key")
	var out, errOut bytes.Buffer
	if code := dispatch([]string{"keygen", "--out", path}, &out, &errOut); code != 0 || out.Len() != 0 {
		t.Fatalf("keygen --out: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	raw, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(raw))
	k, err := crypt.ParsePrivateKey(secret)
	if err != nil || !strings.Contains(errOut.String(), k.PublicKey().Base64()) {
		t.Fatalf("key file holds %v; stderr %q should show its public key", err, errOut.String())
	}
	if code := dispatch([]string{"keygen", "--out", path}, &out, &errOut); code == 0 {
		t.Error("keygen --out over an existing key succeeded")
	}
	if raw2, _ := os.ReadFile(path); string(raw2) != string(raw) {
		t.Error("keygen --out replaced an existing key")
	}

	peer, _ := crypt.GenerateKey(rand.Reader)
	args := func(key string) []string {
		return []string{"--key", key, "--peer-key", peer.PublicKey().Base64(), "--listen", "127.0.0.1:4500", "--allow", "198.18.2.0/24"}
	}
	if _, err := parseRunConfig(args(path), io.Discard); err != nil {
		t.Fatalf("a 0600 key: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		os.Chmod(path, mode)
		_, err := parseRunConfig(args(path), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Errorf("a %04o key: %v; want it refused, saying 'chmod 600 %s'", mode, err, path)
		}
	}
	os.Chmod(path, 0o400)
	if _, err := parseRunConfig(args(path), io.Discard); err != nil {
		t.Errorf("a 0400 key: %v", err)
	}
	code, stdout, stderr := run(append([]string{"run", "--check"}, args(secret)...)...)
	if code != 2 || !strings.Contains(stderr, "not the key itself") {
		t.Errorf("--key with the key itself: exit %d, stderr %q; want a usage error", code, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Error("the private key given as --key is echoed back")
	}
}
