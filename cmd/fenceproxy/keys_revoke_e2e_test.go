package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// Revoking every signing key, as an operator answering a leak does: the
// real binary, its keys file in a ConfigMap-style directory, reloaded by
// the file watch and by SIGHUP. An emptied file ({"keys":[]}) and a removed
// file each refuse every signed token (401) from the reload on, also one
// verified and cached before; a file that does not parse keeps the last
// good keys; publishing keys again ends the revocation. A replica started
// on an emptied file serves, and refuses every signed token.
func TestKeysFileRevocationEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	k1 := newTestKey(t, fencejwt.KindEdDSA, "k1")
	cm := newConfigMapDir(t, "keys.json", keySet(t, k1))
	keysFile := filepath.Join(cm.dir, "keys.json")
	up := newCountingUpstream(t)
	routes := writeRoutes(t, "routes:\n  - name: orders\n    path: /orders/{id}\n    resource: orders/{id}\n")
	r := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL":    up.URL,
		"FENCE_BOLT_PATH":       filepath.Join(t.TempDir(), "marks.db"),
		"FENCE_ROUTES_FILE":     routes,
		"FENCE_TOKEN_KEYS_FILE": keysFile,
	})
	want := func(what, token string, status int, detail string) {
		t.Helper()
		a := put(t, r.data, "/orders/7", token)
		if a.status != status {
			t.Fatalf("%s: status %d, want %d (%v)", what, a.status, status, a.problem)
		}
		if detail != "" && (a.problem["type"] != "urn:fenceproxy:token-invalid" || !strings.Contains(a.problem["detail"].(string), detail)) {
			t.Fatalf("%s: %v, want token-invalid with %q", what, a.problem, detail)
		}
	}
	reloads := func(result string) float64 {
		return r.metric(t, `fenceproxy_config_reloads_total{file="keys",result="`+result+`"}`)
	}
	const revoked = "no signing key is in force"

	cached := k1.mint(t, 10, "", time.Hour)
	want("k1 before the leak", cached, 200, "")

	// Emptied: every key revoked, the token verified before included.
	cm.swap("keys.json", []byte(`{"keys":[]}`))
	waitFor(t, "the emptied file reloaded", func() bool { return reloads("ok") == 1 })
	want("the cached token after emptying", cached, 401, revoked)
	want("a new k1 token after emptying", k1.mint(t, 11, "", time.Hour), 401, revoked)
	if !strings.Contains(r.logs.String(), "every signed token is refused") {
		t.Errorf("the revocation is not logged:\n%s", r.logs)
	}

	// A broken file keeps the last good set, which is now the empty one:
	// a typo never brings a revoked key back.
	cm.swap("keys.json", []byte(`{"keys": [`))
	waitFor(t, "the broken file counted", func() bool { return reloads("error") == 1 })
	want("after a broken file, still revoked", cached, 401, revoked)

	// Keys published again: k1 back (the operator's new key, in a real
	// answer to a leak).
	cm.swap("keys.json", keySet(t, k1))
	waitFor(t, "the keys back", func() bool { return reloads("ok") == 2 })
	want("k1 back", k1.mint(t, 12, "", time.Hour), 200, "")

	// A broken file now keeps k1.
	cm.swap("keys.json", []byte(`not json`))
	waitFor(t, "the second broken file counted", func() bool { return reloads("error") == 2 })
	want("after a broken file, k1 kept", k1.mint(t, 13, "", time.Hour), 200, "")
	cm.swap("keys.json", keySet(t, k1))
	waitFor(t, "k1 again", func() bool { return reloads("ok") == 3 })

	// Removed: as emptied.
	if err := os.Remove(keysFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removal reloaded", func() bool { return reloads("ok") == 4 })
	want("after removal", k1.mint(t, 14, "", time.Hour), 401, revoked)
	// SIGHUP with the file still absent: still revoked, counted as a reload.
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP re-read the absent file", func() bool { return reloads("ok") == 5 })
	want("after SIGHUP", k1.mint(t, 15, "", time.Hour), 401, revoked)
	// Published again under the same name.
	if err := os.Symlink(filepath.Join("..data", "keys.json"), keysFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file back", func() bool { return reloads("ok") == 6 })
	want("k1 after the file came back", k1.mint(t, 16, "", time.Hour), 200, "")

	if got := up.n.Load(); got != 4 {
		t.Fatalf("the upstream received %d requests, want the 4 admitted", got)
	}

	// A replica started on an emptied file serves and refuses.
	empty := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(empty, []byte(`{"keys":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL":    up.URL,
		"FENCE_BOLT_PATH":       filepath.Join(t.TempDir(), "marks.db"),
		"FENCE_ROUTES_FILE":     routes,
		"FENCE_TOKEN_KEYS_FILE": empty,
	})
	if a := put(t, r2.data, "/orders/7", k1.mint(t, 20, "", time.Hour)); a.status != 401 {
		t.Fatalf("a replica started on an empty keys file: %d %v, want 401", a.status, a.problem)
	}
}
