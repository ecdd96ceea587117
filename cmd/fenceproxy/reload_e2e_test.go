package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The real binary re-reads its routes file: a ConfigMap-style symlink swap
// puts a new table in force between requests, an invalid file keeps the
// old table (logged with its problem, counted, /readyz still 200), and
// SIGHUP re-reads the file. The marks are the store's: a reload loses none.
func TestRoutesReloadEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	const v1 = "routes:\n  - {name: orders, path: '/orders/{id}', resource: 'orders/{id}'}\n"
	cm := newConfigMapDir(t, "routes.yaml", []byte(v1))
	up := newCountingUpstream(t)
	r := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_BOLT_PATH":    filepath.Join(t.TempDir(), "marks.db"),
		"FENCE_ROUTES_FILE":  filepath.Join(cm.dir, "routes.yaml"),
	})
	reloads := func(result string) float64 {
		return r.metric(t, `fenceproxy_config_reloads_total{file="routes",result="`+result+`"}`)
	}
	want := func(what, path, token string, status int) {
		t.Helper()
		if a := put(t, r.data, path, token); a.status != status {
			t.Fatalf("%s: PUT %s token %q: status %d, want %d (%v)", what, path, token, a.status, status, a.problem)
		}
	}
	want("v1", "/orders/1", "5", 200)
	want("v1 stale", "/orders/1", "4", 409)
	want("v1 default rule", "/reports/1", "", 428)

	// A new table: reports unfenced, orders in dry run.
	cm.swap("routes.yaml", []byte(v1[:len(v1)-2]+", enforce: false}\n  - {name: reports, path: '/reports/*', fence: false}\n"))
	waitFor(t, "the routes file reloaded", func() bool { return reloads("ok") == 1 })
	want("v2 unfenced", "/reports/1", "", 200)
	want("v2 dry run forwards a stale token", "/orders/1", "4", 200)
	if n := r.metric(t, `fenceproxy_requests_total{decision="would_stale",route="orders"}`); n != 1 {
		t.Errorf("would_stale = %v, want 1", n)
	}

	// An invalid file: the v2 table stays, the problem is logged, counted.
	cm.swap("routes.yaml", []byte("routes:\n  - {name: orders, path: '/orders/{id}', resource: 'orders/{nope}'}\n"))
	waitFor(t, "the invalid file counted", func() bool { return reloads("error") == 1 })
	if g := r.metric(t, `fenceproxy_config_last_reload_successful{file="routes"}`); g != 0 {
		t.Errorf("fenceproxy_config_last_reload_successful = %v after an invalid file, want 0", g)
	}
	want("v2 still in force", "/reports/1", "", 200)
	if !strings.Contains(r.logs.String(), "the one read before stays in force") || !strings.Contains(r.logs.String(), "nope") {
		t.Fatalf("the invalid file is not logged with its problem:\n%s", r.logs)
	}
	if s := status(t, r.admin+"/readyz"); s != http.StatusOK {
		t.Errorf("/readyz %d after an invalid routes file, want 200", s)
	}

	// SIGHUP re-reads it: still invalid, counted again.
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP re-read the file", func() bool { return reloads("error") == 2 })

	// Back to v1, enforcing again: the mark survived every reload.
	cm.swap("routes.yaml", []byte(v1))
	waitFor(t, "v1 again", func() bool { return reloads("ok") == 2 })
	if g := r.metric(t, `fenceproxy_config_last_reload_successful{file="routes"}`); g != 1 {
		t.Errorf("fenceproxy_config_last_reload_successful = %v after a good file, want 1", g)
	}
	want("v1 again: the mark kept", "/orders/1", "4", 409)
	want("v1 again: default rule", "/reports/1", "", 428)
}
