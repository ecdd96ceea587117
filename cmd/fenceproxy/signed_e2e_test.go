package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// configMapDir is a directory laid out as Kubernetes mounts a ConfigMap or
// Secret: the file is a symlink through ..data to a timestamped directory,
// and an update swaps ..data in one rename.
type configMapDir struct {
	t   *testing.T
	dir string
	n   int
}

func newConfigMapDir(t *testing.T, name string, content []byte) *configMapDir {
	d := &configMapDir{t: t, dir: t.TempDir()}
	d.swap(name, content)
	if err := os.Symlink(filepath.Join("..data", name), filepath.Join(d.dir, name)); err != nil {
		t.Fatal(err)
	}
	return d
}

// swap publishes content as the kubelet does: a new timestamped directory,
// ..data_tmp pointing at it, renamed over ..data, the old directory removed.
func (d *configMapDir) swap(name string, content []byte) {
	d.t.Helper()
	d.n++
	ts := filepath.Join(d.dir, "..2026_11_30_00_00_0"+string(rune('0'+d.n)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, name), content, 0o644); err != nil {
		d.t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(d.dir, "..data"))
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
	if old != "" {
		_ = os.RemoveAll(filepath.Join(d.dir, old))
	}
}

type testKey struct {
	signer *fencejwt.Signer
	public json.RawMessage // the key of the public set
}

func newTestKey(t *testing.T, kind, kid string) testKey {
	t.Helper()
	priv, set, err := fencejwt.NewKey(kind, kid)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fencejwt.ParseSigningKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	var one struct{ Keys []json.RawMessage }
	if err := json.Unmarshal(set, &one); err != nil {
		t.Fatal(err)
	}
	return testKey{signer: s, public: one.Keys[0]}
}

func keySet(t *testing.T, keys ...testKey) []byte {
	t.Helper()
	var all []json.RawMessage
	for _, k := range keys {
		all = append(all, k.public)
	}
	b, err := json.Marshal(map[string]any{"keys": all})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (k testKey) mint(t *testing.T, fence uint64, res string, ttl time.Duration) string {
	t.Helper()
	tok, err := k.signer.Sign(fencejwt.Claims{Fence: fence, Resource: res, Expiry: time.Now().Add(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// confused is the algorithm-confusion forgery: an HS256 JWS naming an
// Ed25519 key's kid, MACed with that public key's bytes (which anyone
// has).
func confused(t *testing.T, k testKey, kid, claims string) string {
	t.Helper()
	var jwk struct{ X string }
	if err := json.Unmarshal(k.public, &jwk); err != nil {
		t.Fatal(err)
	}
	pub, err := base64.RawURLEncoding.DecodeString(jwk.X)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	in := enc([]byte(`{"alg":"HS256","kid":"`+kid+`"}`)) + "." + enc([]byte(claims))
	m := hmac.New(sha256.New, pub)
	m.Write([]byte(in))
	return in + "." + enc(m.Sum(nil))
}

// The real binary with FENCE_TOKEN_KEYS_FILE in a ConfigMap-style
// directory: signed tokens admitted, forged, expired, wrong-resource and
// algorithm-confusion tokens refused without touching the mark; the keys
// rotated mid-run by symlink swaps (a new key in, the old key out), a
// broken file keeping the old keys, and SIGHUP re-reading the file.
func TestSignedTokensEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	k1 := newTestKey(t, fencejwt.KindEdDSA, "k1")
	k2 := newTestKey(t, fencejwt.KindES256, "k2")
	impostor := newTestKey(t, fencejwt.KindEdDSA, "k1") // same kid, another key
	cm := newConfigMapDir(t, "keys.json", keySet(t, k1))
	up := newCountingUpstream(t)
	routes := writeRoutes(t, "routes:\n  - name: orders\n    path: /orders/{id}\n    resource: orders/{id}\n")
	r := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL":    up.URL,
		"FENCE_BOLT_PATH":       filepath.Join(t.TempDir(), "marks.db"),
		"FENCE_ROUTES_FILE":     routes,
		"FENCE_TOKEN_KEYS_FILE": filepath.Join(cm.dir, "keys.json"),
	})
	want := func(what, token string, status int, typ, detail string) {
		t.Helper()
		a := put(t, r.data, "/orders/7", token)
		if a.status != status {
			t.Fatalf("%s: status %d, want %d (%v)", what, a.status, status, a.problem)
		}
		if typ != "" && (a.problem["type"] != typ || !strings.Contains(a.problem["detail"].(string), detail)) {
			t.Fatalf("%s: %v, want %s with %q", what, a.problem, typ, detail)
		}
	}
	reloads := func(result string) float64 {
		return r.metric(t, `fenceproxy_config_reloads_total{file="keys",result="`+result+`"}`)
	}

	want("signed 10", k1.mint(t, 10, "orders/*", time.Minute), 200, "", "")
	want("signed 9", k1.mint(t, 9, "orders/7", time.Minute), 409, "urn:fenceproxy:stale-token", "older than")
	want("a plain number", "11", 401, "urn:fenceproxy:token-invalid", "not a compact JWS")
	want("forged", impostor.mint(t, 1000, "", time.Minute), 401, "urn:fenceproxy:token-invalid", "bad signature")
	want("expired", k1.mint(t, 1000, "", -time.Minute), 401, "urn:fenceproxy:token-invalid", "expired at")
	want("another resource", k1.mint(t, 1000, "orders/8", time.Minute), 403, "urn:fenceproxy:token-wrong-resource", "orders/8")
	want("algorithm confusion", confused(t, k1, "k1", `{"fence":"1000","exp":9999999999}`), 401, "urn:fenceproxy:token-invalid", `names algorithm "HS256"`)
	// None of the refused 1000s moved the mark.
	want("signed 10 again", k1.mint(t, 10, "", time.Minute), 200, "", "")

	// Rotation, step 1: the new key published beside the old.
	cm.swap("keys.json", keySet(t, k1, k2))
	waitFor(t, "the keys file reloaded", func() bool { return reloads("ok") == 1 })
	want("the new key", k2.mint(t, 11, "", time.Minute), 200, "", "")
	want("the old key still", k1.mint(t, 11, "", time.Minute), 200, "", "")
	// Step 2: the old key removed; a token it signed (verified and cached
	// before) no longer passes.
	oldTok := k1.mint(t, 12, "", time.Minute)
	want("the old key before removal", oldTok, 200, "", "")
	cm.swap("keys.json", keySet(t, k2))
	waitFor(t, "the keys file reloaded again", func() bool { return reloads("ok") == 2 })
	want("the removed key", oldTok, 401, "urn:fenceproxy:token-invalid", `no key with kid "k1"`)

	// A broken file keeps the keys in force, logged and counted.
	cm.swap("keys.json", []byte(`{"keys": [`))
	waitFor(t, "the broken file counted", func() bool { return reloads("error") == 1 })
	want("the new key after a broken file", k2.mint(t, 13, "", time.Minute), 200, "", "")
	if !strings.Contains(r.logs.String(), "the one read before stays in force") {
		t.Fatalf("the broken file is not logged:\n%s", r.logs)
	}

	// SIGHUP re-reads the file (still broken: counted again, still k2).
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP re-read the file", func() bool { return reloads("error") == 2 })
	cm.swap("keys.json", keySet(t, k1))
	waitFor(t, "the mended file in force", func() bool { return reloads("ok") == 3 })
	want("k1 is back", k1.mint(t, 14, "", time.Minute), 200, "", "")

	if got := up.n.Load(); got != 7 {
		t.Fatalf("the upstream received %d requests, want the 7 admitted", got)
	}
}
