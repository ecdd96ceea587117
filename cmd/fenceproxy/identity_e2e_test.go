package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Redis loses everything (FLUSHALL; a restart without persistence): the
// replica answers 503 store-lost, is not ready and says so in its metrics;
// the operator raises the mark and forces a new identity record; the replica
// takes it up and refuses the stale holder against the raised mark.
func TestStoreLostAndRecovered(t *testing.T) {
	rs := redistest.Start(t)
	up := newCountingUpstream(t)
	env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL()}
	p := startWith(t, env, serveHooks{settingsEvery: 200 * time.Millisecond, identityEvery: 100 * time.Millisecond})
	waitStoreOK(t, p)
	if a := put(t, p.data, "/r", "42"); a.status != 200 {
		t.Fatalf("42: %+v", a)
	}
	if id := getMark(t, rs.Client(t), "fence:"); id == "" {
		t.Fatal("no identity record at fence: after the first start")
	}

	for _, lose := range []func(){
		func() { redisDo(t, rs.Addr(), nil, "FLUSHALL") },
		func() { rs.Kill(); rs.Restart(t) }, // appendonly no: a restart keeps nothing
	} {
		lose()
		a := put(t, p.data, "/r", "41")
		if a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-lost" {
			t.Fatalf("41 after the store lost everything: %+v, want 503 store-lost", a)
		}
		if state, _ := storeVerdict(t, p); state != "lost" {
			t.Fatalf("store state %q while the store is lost", state)
		}
		if code, _ := readyz(t, p); code != 200 {
			t.Fatalf("readyz %d while the store is lost: unfenced requests still need the replica", code)
		}
		if !strings.Contains(body(t, p.admin+"/metrics"), "fenceproxy_store_lost 1") {
			t.Fatal("fenceproxy_store_lost is not 1")
		}
		// The operator: raise the mark to the lease service's current token,
		// then force a new record.
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"marks", "raise", "default", "42"}, env, &out, &errOut); err != nil {
			t.Fatalf("marks raise: %v\n%s", err, errOut.String())
		}
		if err := run(context.Background(), []string{"store", "init", "--force"}, env, &out, &errOut); err != nil {
			t.Fatalf("store init --force: %v\n%s", err, errOut.String())
		}
		waitFor(t, "the forced record taken up", func() bool { state, _ := storeVerdict(t, p); return state == "ok" })
		if a := put(t, p.data, "/r", "41"); a.status != 409 {
			t.Fatalf("41 after recovery: %+v, want 409 against the raised mark", a)
		}
		if a := put(t, p.data, "/r", "43"); a.status != 200 {
			t.Fatalf("43 after recovery: %+v", a)
		}
	}
	if n := up.n.Load(); n != 3 {
		t.Fatalf("upstream saw %d requests, want 3 (42 and each 43)", n)
	}
}
