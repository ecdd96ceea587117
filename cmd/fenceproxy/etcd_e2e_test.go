package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// FENCE_STORE=etcd through the real program: admissions, the identity
// record written at start, the mark readable with marks get, and a store
// that lost everything answered with store-lost.
func TestEtcdStoreEndToEnd(t *testing.T) {
	ec := etcdtest.Start(t)
	up := newCountingUpstream(t)
	env := map[string]string{
		"FENCE_UPSTREAM_URL":   up.URL,
		"FENCE_STORE":          "etcd",
		"FENCE_ETCD_ENDPOINTS": strings.Join(ec.Endpoints(), ","),
	}
	p := start(t, env)
	waitFor(t, "ready", func() bool { return status(t, p.admin+"/readyz") == 200 })
	if a := put(t, p.data, "/r", "42"); a.status != 200 {
		t.Fatalf("42: %+v", a)
	}
	if a := put(t, p.data, "/r", "41"); a.status != 409 || a.problem["highWaterMark"] != "42" {
		t.Fatalf("41: %+v", a)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"marks", "get", "default"}, env, &out, &errOut); err != nil || out.String() != "default 42\n" {
		t.Fatalf("marks get: %q %v %s", out.String(), err, errOut.String())
	}
	// Everything under the prefix deleted: the identity record is gone.
	cl := ec.Client(t)
	if _, err := cl.Delete(context.Background(), "fence:", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if a := put(t, p.data, "/r", "41"); a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-lost" {
		t.Fatalf("41 after the etcd keys were deleted: %+v, want 503 store-lost", a)
	}
	if n := up.n.Load(); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
}
