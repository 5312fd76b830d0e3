package main

import (
	"bytes"
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
