package etcdstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// The client certificate is what its files hold at the handshake: a
// renewal is presented from then on, and a pair caught half written (the
// key changed, the certificate not yet) or gone leaves the last good one.
func TestClientCertFiles(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	files.Issue(t, cert, key, "first", time.Hour)
	k := &clientCertFiles{certFile: cert, keyFile: key, log: zap.NewNop()}
	if err := k.load(); err != nil {
		t.Fatal(err)
	}
	name := func() string {
		t.Helper()
		p, err := k.get(nil)
		if err != nil || p == nil || p.Leaf == nil {
			t.Fatalf("get = %v, %v", p, err)
		}
		return p.Leaf.Subject.CommonName
	}
	if got := name(); got != "first" {
		t.Fatalf("presented %q, want first", got)
	}
	files.Issue(t, cert, key, "renewed", time.Hour)
	if got := name(); got != "renewed" {
		t.Fatalf("after the renewal presented %q, want renewed", got)
	}
	// A new key beside the old certificate: they do not match.
	other := filepath.Join(dir, "other")
	files.Issue(t, other+".crt", other+".key", "other", time.Hour)
	if err := os.Rename(other+".key", key); err != nil {
		t.Fatal(err)
	}
	if got := name(); got != "renewed" {
		t.Fatalf("with a mismatched pair presented %q, want the last good one (renewed)", got)
	}
	if err := os.Remove(cert); err != nil {
		t.Fatal(err)
	}
	if got := name(); got != "renewed" {
		t.Fatalf("with the certificate gone presented %q, want the last good one (renewed)", got)
	}
}
