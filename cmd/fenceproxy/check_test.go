package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/boltstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// runCheck runs `fenceproxy check args...` with env and returns its output
// and error.
func runCheck(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"check"}, args...), env, &out, io.Discard)
	return out.String(), err
}

// wantLine fails unless out has a line of level for the check name that
// contains each of want.
func wantLine(t *testing.T, out, level, name string, want ...string) {
	t.Helper()
	prefix := fmt.Sprintf("%-8s %s: ", level, name)
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Fatalf("line %q lacks %q", line, w)
			}
		}
		return
	}
	t.Fatalf("no line starting %q in:\n%s", prefix, out)
}

// Plain check prints the route table in effect, and says when there is no
// routes file that every write shares one mark.
func TestCheckPrintsRouteTable(t *testing.T) {
	routes := writeRoutes(t, `routes:
  - name: order-writes
    methods: [PUT, DELETE]
    path: /orders/{orderID}
    resource: orders/{orderID}
  - name: jobs
    path: /jobs/{id}
    resource: jobs/{id}
    compare: ">"
    token: optional
  - name: reports
    path: /reports/*
    case: sensitive
    fence: false
`)
	out, err := runCheck(t, map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000", "FENCE_ROUTES_FILE": routes})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range [][]string{
		{"NAME", "METHODS", "PATH", "CASE", "RESOURCE", "COMPARE", "TOKEN", "FENCE"},
		{"order-writes", "PUT,DELETE", "/orders/{orderID}", "insensitive", "orders/{orderID}", ">=", "required", "on"},
		{"jobs", "POST,PUT,PATCH,DELETE", "/jobs/{id}", "insensitive", "jobs/{id}", ">", "optional", "on"},
		{"reports", "POST,PUT,PATCH,DELETE", "/reports/*", "sensitive", "-", "-", "-", "off"},
		{"default", "POST,PUT,PATCH,DELETE", "(any", "path", "no", "route", "matches)", "-", "default", ">=", "required", "on"},
	} {
		if !hasRow(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}
	if strings.Contains(out, "no routes file") {
		t.Errorf("warns of a missing routes file that is there:\n%s", out)
	}

	out, err = runCheck(t, map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "no routes file") || !strings.Contains(out, "two unrelated writers fence each other") ||
		!hasRow(out, []string{"default", "POST,PUT,PATCH,DELETE", "(any", "path", "no", "route", "matches)", "-", "default", ">=", "required", "on"}) {
		t.Errorf("without a routes file:\n%s", out)
	}

	// A rule with a sequence brings the SEQUENCE column.
	routes = writeRoutes(t, `routes:
  - name: jobs
    path: /jobs/{id:uint}
    resource: jobs/{id}
    sequence: required
`)
	out, err = runCheck(t, map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000", "FENCE_ROUTES_FILE": routes})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range [][]string{
		{"NAME", "METHODS", "PATH", "CASE", "RESOURCE", "COMPARE", "TOKEN", "SEQUENCE", "FENCE"},
		{"jobs", "POST,PUT,PATCH,DELETE", "/jobs/{id:uint}", "insensitive", "jobs/{id}", ">=", "required", "required", "on"},
		{"default", "POST,PUT,PATCH,DELETE", "(any", "path", "no", "route", "matches)", "-", "default", ">=", "required", "off", "on"},
	} {
		if !hasRow(out, row) {
			t.Errorf("no row %q in:\n%s", row, out)
		}
	}

	// A route out of the drain barrier says so in FENCE; FENCE_DRAIN=off
	// says it of every fenced rule, and the barrier's line follows the
	// variables.
	routes = writeRoutes(t, `routes:
  - {name: slow, path: /slow, resource: slow, drain: false}
  - {name: fast, path: /fast, resource: fast}
`)
	for _, tc := range []struct {
		env        map[string]string
		slow, fast []string
		line       string
	}{
		{map[string]string{"FENCE_DRAIN_TIMEOUT": "2s"},
			[]string{"on,", "no", "drain"}, []string{"on"}, "Drain barrier: on (FENCE_DRAIN); an admitted request waits"},
		{map[string]string{"FENCE_DRAIN": "off", "FENCE_UPSTREAM_TIMEOUT": "5s"},
			[]string{"on,", "no", "drain"}, []string{"on,", "no", "drain"}, "Drain barrier: off (FENCE_DRAIN=off)"},
	} {
		env := map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000", "FENCE_ROUTES_FILE": routes}
		for k, v := range tc.env {
			env[k] = v
		}
		out, err = runCheck(t, env)
		if err != nil {
			t.Fatal(err)
		}
		slow := append([]string{"slow", "POST,PUT,PATCH,DELETE", "/slow", "insensitive", "slow", ">=", "required"}, tc.slow...)
		fast := append([]string{"fast", "POST,PUT,PATCH,DELETE", "/fast", "insensitive", "fast", ">=", "required"}, tc.fast...)
		if !hasRow(out, slow) || !hasRow(out, fast) || !strings.Contains(out, tc.line) {
			t.Errorf("%v: want rows %q, %q and %q in:\n%s", tc.env, slow, fast, tc.line, out)
		}
	}
	if !strings.Contains(out, "FENCE_UPSTREAM_TIMEOUT 5s") {
		t.Errorf("the barrier line does not show FENCE_UPSTREAM_TIMEOUT:\n%s", out)
	}
}

// hasRow reports whether a line of out has exactly the fields row.
func hasRow(out string, row []string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(row, " ") {
			return true
		}
	}
	return false
}

// Without a routes file the program warns at start that every write
// shares one mark; with one it does not.
func TestNoRoutesFileWarns(t *testing.T) {
	up := newCountingUpstream(t)
	p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE": "memory"})
	if logs := p.logs.String(); !strings.Contains(logs, `"level":"warn"`) || !strings.Contains(logs, "no routes file") ||
		!strings.Contains(logs, "two unrelated writers fence each other") {
		t.Fatalf("no warning:\n%s", logs)
	}
	routes := writeRoutes(t, "routes:\n  - name: a\n    path: /a\n    resource: a\n")
	p2 := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE": "memory", "FENCE_ROUTES_FILE": routes})
	if logs := p2.logs.String(); strings.Contains(logs, "no routes file") {
		t.Fatalf("warns with a routes file:\n%s", logs)
	}
}

// Plain check contacts nothing: a dead store and upstream do not fail it.
// Its flags: -h exits 0 naming --connect; an unknown flag or an argument is
// a usage error.
func TestCheckOfflineAndFlags(t *testing.T) {
	dead := freePort(t)
	out, err := runCheck(t, map[string]string{"FENCE_UPSTREAM_URL": "http://" + dead, "FENCE_REDIS_URL": "redis://" + dead + "/0"})
	if err != nil || strings.Contains(out, "store:") || strings.Contains(out, "upstream:") {
		t.Fatalf("plain check: %v\n%s", err, out)
	}
	out, err = runCheck(t, nil, "-h")
	if err != nil || !strings.Contains(out, "-connect") {
		t.Fatalf("check -h: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--bogus"}, {"extra"}} {
		if _, err := runCheck(t, nil, args...); exitCode(err) != 2 {
			t.Fatalf("check %v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

// check --connect with the embedded store: a new file's directory must take
// a file (nothing is left behind), an existing file must open and not be
// locked, and no existing file is changed by the check.
func TestCheckConnectBolt(t *testing.T) {
	up := newCountingUpstream(t)
	dir := t.TempDir()
	env := func(path string) map[string]string {
		return map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_BOLT_PATH": path}
	}

	fresh := filepath.Join(dir, "new", "marks.db")
	if err := os.Mkdir(filepath.Dir(fresh), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := runCheck(t, env(fresh), "--connect")
	if err != nil {
		t.Fatalf("new file: %v\n%s", err, out)
	}
	wantLine(t, out, "ok", "store", "will be created")
	wantLine(t, out, "ok", "upstream", "accepts TCP connections")
	if ents, _ := os.ReadDir(filepath.Dir(fresh)); len(ents) != 0 {
		t.Fatalf("check left %v behind", ents)
	}

	out, err = runCheck(t, env(filepath.Join(dir, "missing", "marks.db")), "--connect")
	if err == nil || exitCode(err) != 1 {
		t.Fatalf("missing directory: %v\n%s", err, out)
	}
	wantLine(t, out, "FAILED", "store", "cannot be created", "no such file or directory")

	existing := filepath.Join(dir, "marks.db")
	s, err := boltstore.Open(existing, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(context.Background(), fencestore.Admission{Resource: "r", Token: 42, Compare: fencestore.AtLeast}); err != nil {
		t.Fatal(err)
	}
	out, err = runCheck(t, env(existing), "--connect")
	if err == nil {
		t.Fatalf("a locked file passed:\n%s", out)
	}
	wantLine(t, out, "FAILED", "store", "locked by another process")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, existing)
	out, err = runCheck(t, env(existing), "--connect")
	if err != nil {
		t.Fatalf("existing file: %v\n%s", err, out)
	}
	wantLine(t, out, "ok", "store", "opens and is not locked")
	if !bytes.Equal(readFile(t, existing), before) {
		t.Fatal("check changed the store file")
	}
	s, err = boltstore.Open(existing, boltstore.Options{})
	if err != nil {
		t.Fatalf("reopen after check: %v", err)
	}
	if m, ok, err := s.Mark(context.Background(), "r"); err != nil || !ok || m != 42 {
		t.Fatalf("mark after check: %d %t %v", m, ok, err)
	}
	_ = s.Close()

	corrupt := filepath.Join(dir, "corrupt.db")
	junk := bytes.Repeat([]byte("not a bbolt file "), 1000)
	if err := os.WriteFile(corrupt, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runCheck(t, env(corrupt), "--connect")
	if err == nil {
		t.Fatalf("a corrupt file passed:\n%s", out)
	}
	wantLine(t, out, "FAILED", "store", "not a usable bbolt file")
	if !bytes.Equal(readFile(t, corrupt), junk) {
		t.Fatal("check changed the corrupt file")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// check --connect: the memory store is a warning, not a failure; an
// upstream that does not listen is a failure.
func TestCheckConnectMemoryAndUpstream(t *testing.T) {
	up := newCountingUpstream(t)
	out, err := runCheck(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE": "memory"}, "--connect")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantLine(t, out, "warning", "store", "vanish on restart")

	dead := freePort(t)
	out, err = runCheck(t, map[string]string{"FENCE_UPSTREAM_URL": "http://" + dead, "FENCE_STORE": "memory"}, "--connect")
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "1 of 2 checks FAILED") {
		t.Fatalf("dead upstream: %v\n%s", err, out)
	}
	wantLine(t, out, "FAILED", "upstream", dead, "connection refused")
	if up.n.Load() != 0 {
		t.Fatal("check sent a request to the upstream")
	}
}

// check --connect with Redis: PING, then the eviction and persistence checks
// with the runtime's words; a warning fails nothing, refuse fails.
func TestCheckConnectRedis(t *testing.T) {
	up := newCountingUpstream(t)
	safe := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	unsafe := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "everysec",
		"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	noAOF := redistest.Start(t, "--appendonly", "no")
	noFsyncOnRewrite := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always", "--no-appendfsync-on-rewrite", "yes")
	noConfig := redistest.Start(t, "--rename-command", "CONFIG", "")
	replica := redistest.StartReplica(t, safe)
	env := func(url string, extra ...string) map[string]string {
		m := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": url}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	type line struct {
		level, name string
		want        []string
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		fails bool
		lines []line
	}{
		{"safe", env(safe.URL()), false, []line{
			{"ok", "store", []string{"redis answers PING"}},
			{"ok", "redis eviction", []string{"maxmemory-policy noeviction cannot evict marks"}},
			{"ok", "redis persistence", []string{"appendonly yes, appendfsync always"}},
			{"ok", "upstream", nil},
		}},
		{"unsafe, defaults", env(unsafe.URL()), true, []line{
			{"FAILED", "redis eviction", []string{"Redis maxmemory-policy is allkeys-lru, which can evict marks (FENCE_REDIS_EVICTION=refuse)"}},
			{"warning", "redis persistence", []string{"appendfsync is everysec", "about a second", "(FENCE_REDIS_PERSISTENCE=warn)"}},
		}},
		{"unsafe, eviction warn", env(unsafe.URL(), "FENCE_REDIS_EVICTION", "warn"), false, []line{
			{"warning", "redis eviction", []string{"allkeys-lru", "(FENCE_REDIS_EVICTION=warn)"}},
		}},
		{"unsafe, both off", env(unsafe.URL(), "FENCE_REDIS_EVICTION", "off", "FENCE_REDIS_PERSISTENCE", "off"), false, []line{
			{"skipped", "redis eviction", []string{"FENCE_REDIS_EVICTION=off"}},
			{"skipped", "redis persistence", []string{"FENCE_REDIS_PERSISTENCE=off"}},
		}},
		{"no AOF, persistence refuse", env(noAOF.URL(), "FENCE_REDIS_PERSISTENCE", "refuse"), true, []line{
			{"ok", "redis eviction", nil},
			{"FAILED", "redis persistence", []string{"appendonly is no", "RDB snapshot", "(FENCE_REDIS_PERSISTENCE=refuse)"}},
		}},
		{"no fsync while a child runs, persistence refuse", env(noFsyncOnRewrite.URL(), "FENCE_REDIS_PERSISTENCE", "refuse"), true, []line{
			{"ok", "redis eviction", nil},
			{"FAILED", "redis persistence", []string{"no-appendfsync-on-rewrite is yes", "replies before any fsync", "(FENCE_REDIS_PERSISTENCE=refuse)"}},
		}},
		{"CONFIG refused", env(noConfig.URL()), true, []line{
			{"FAILED", "redis eviction", []string{"refuses CONFIG GET", "FENCE_REDIS_EVICTION=warn", "unknown command"}},
			{"warning", "redis persistence", []string{"refuses CONFIG GET", "FENCE_REDIS_PERSISTENCE=off", "'appendonly'"}},
		}},
		{"CONFIG refused, settings stated", env(noConfig.URL(), "FENCE_REDIS_PERSISTENCE", "refuse",
			"FENCE_REDIS_SETTINGS", "maxmemory-policy=noeviction,appendonly=yes,appendfsync=always"), false, []line{
			{"ok", "redis eviction", []string{"maxmemory-policy noeviction cannot evict marks (as FENCE_REDIS_SETTINGS states it"}},
			{"ok", "redis persistence", []string{"appendfsync always", "(as FENCE_REDIS_SETTINGS states it"}},
		}},
		{"readable, stated otherwise", env(safe.URL(), "FENCE_REDIS_SETTINGS", "appendonly=yes,appendfsync=everysec"), false, []line{
			{"ok", "redis persistence", []string{"appendfsync always"}},
			{"warning", "redis stated settings", []string{"appendfsync stated everysec, read always"}},
		}},
		{"a replica", env(replica.URL()), true, []line{
			{"FAILED", "store", []string{"answers as a replica (role slave)", "admissions run only on a master"}},
		}},
		{"redis down", env("redis://" + freePort(t) + "/0"), true, []line{
			{"FAILED", "store", []string{"does not answer PING", "connection refused"}},
			{"skipped", "redis eviction", []string{"redis does not answer"}},
			{"skipped", "redis persistence", []string{"redis does not answer"}},
			{"ok", "upstream", nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCheck(t, tc.env, "--connect")
			if (err != nil) != tc.fails {
				t.Fatalf("error %v, want failure %t:\n%s", err, tc.fails, out)
			}
			for _, l := range tc.lines {
				wantLine(t, out, l.level, l.name, l.want...)
			}
		})
	}
}

// check --connect says what the running proxy says: the refusal a client
// gets is word for word the check's line.
func TestCheckConnectSameWordsAsRuntime(t *testing.T) {
	rs := redistest.Start(t, "--appendonly", "no", "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-random")
	up := newCountingUpstream(t)
	env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL(), "FENCE_REDIS_PERSISTENCE": "refuse"}
	p := start(t, env)
	_, reasons := storeVerdict(t, p)
	reason, ok := strings.CutPrefix(reasons, "fence store refused as unsafe: ")
	if !ok {
		t.Fatalf("store reasons: %q", reasons)
	}
	out, err := runCheck(t, env, "--connect")
	if err == nil {
		t.Fatalf("check passed:\n%s", out)
	}
	for _, part := range strings.Split(reason, "; ") {
		if !strings.Contains(out, part) {
			t.Errorf("check does not say %q:\n%s", part, out)
		}
	}
}

// check --authz validates the authorization mode's configuration: no
// upstream needed, a dry-run route marked in the table, and no upstream
// check under --connect.
func TestCheckAuthz(t *testing.T) {
	routes := writeRoutes(t, "routes:\n  - {name: orders, path: '/orders/{id}', resource: 'orders/{id}', enforce: false}\n")
	env := map[string]string{"FENCE_ROUTES_FILE": routes, "FENCE_STORE": "memory", "FENCE_AUTHZ_GRPC_ADDR": "127.0.0.1:0"}
	if _, err := runCheck(t, env); err == nil || !strings.Contains(err.Error(), "FENCE_UPSTREAM_URL") {
		t.Fatalf("check without --authz must want an upstream: %v", err)
	}
	out, err := runCheck(t, env, "--authz", "--connect")
	if err != nil {
		t.Fatalf("check --authz: %v\n%s", err, out)
	}
	for _, want := range []string{"mode=authz grpc=127.0.0.1:0", "on, no drain, dry run"} {
		if !strings.Contains(out, want) {
			t.Errorf("check --authz output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "upstream:") {
		t.Errorf("check --authz --connect tried an upstream:\n%s", out)
	}
}
