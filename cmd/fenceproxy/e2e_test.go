package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// syncBuffer collects the program's log lines from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// countingUpstream is the protected service: it counts what reaches it.
type countingUpstream struct {
	*httptest.Server
	n atomic.Int64
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	u := &countingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.n.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

// program is the real program (run's serve path) started in-process on
// loopback ":0" listeners.
type program struct {
	data, admin string
	logs        *syncBuffer
	stop        func() error
}

func start(t *testing.T, env map[string]string) *program {
	t.Helper()
	// The settings check runs every 200ms instead of every 5s, so that
	// tests see a setting changed by CONFIG SET take effect at once.
	return startWith(t, env, serveHooks{settingsEvery: 200 * time.Millisecond})
}

// startWith is start with hooks (listening is set here).
func startWith(t *testing.T, env map[string]string, hooks serveHooks) *program {
	t.Helper()
	return startLoaded(t, config.Load, env, hooks)
}

// startLoaded is startWith with load reading the environment (config.Load
// for serve, config.LoadAuthz for the authorization mode).
func startLoaded(t *testing.T, load func(map[string]string) (*config.Config, error), env map[string]string, hooks serveHooks) *program {
	t.Helper()
	full := map[string]string{
		"FENCE_LISTEN_ADDR": "127.0.0.1:0",
		"FENCE_ADMIN_ADDR":  "127.0.0.1:0",
		"FENCE_LOG_LEVEL":   "debug",
	}
	for k, v := range env {
		full[k] = v
	}
	cfg, err := loadConfigWith(load, full)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &program{logs: &syncBuffer{}}
	addrs := make(chan [2]net.Addr, 1)
	done := make(chan error, 1)
	hooks.listening = func(d, a net.Addr) { addrs <- [2]net.Addr{d, a} }
	go func() { done <- serve(ctx, cfg, p.logs, hooks) }()
	select {
	case a := <-addrs:
		p.data, p.admin = "http://"+a[0].String(), "http://"+a[1].String()
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v\n%s", err, p.logs)
	}
	var once sync.Once
	var stopErr error
	p.stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	t.Cleanup(func() {
		_ = p.stop()
		if t.Failed() {
			t.Logf("program logs:\n%s", p.logs)
		}
	})
	return p
}

type answer struct {
	status     int
	retryAfter string
	problem    map[string]any
}

func put(t *testing.T, base, path, token string) answer {
	t.Helper()
	req, _ := http.NewRequest("PUT", base+path, strings.NewReader("x"))
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		_ = json.NewDecoder(resp.Body).Decode(&a.problem)
	}
	return a
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Redis killed mid-service: fenced requests get 503 with Retry-After and
// nothing is forwarded; after a restart (AOF always) the mark is still there,
// so the stale holder is still refused.
func TestRedisKilledFailsClosedAndRecovers(t *testing.T) {
	rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	up := newCountingUpstream(t)
	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":  up.URL,
		"FENCE_REDIS_URL":     rs.URL(),
		"FENCE_STORE_TIMEOUT": "200ms",
	})
	waitFor(t, "ready", func() bool { return status(t, p.admin+"/readyz") == 200 })
	if a := put(t, p.data, "/orders/1", "41"); a.status != 200 {
		t.Fatalf("41: %+v", a)
	}
	if a := put(t, p.data, "/orders/1", "42"); a.status != 200 {
		t.Fatalf("42: %+v", a)
	}

	rs.Kill()
	before := up.n.Load()
	for _, tok := range []string{"43", "41", "44"} {
		a := put(t, p.data, "/orders/1", tok)
		if a.status != 503 || a.retryAfter == "" || a.problem["type"] != "urn:fenceproxy:store-unavailable" {
			t.Fatalf("token %s with Redis dead: %+v", tok, a)
		}
	}
	if got := up.n.Load() - before; got != 0 {
		t.Fatalf("%d requests forwarded while the store was dead", got)
	}
	if s := status(t, p.admin+"/healthz"); s != 200 {
		t.Fatalf("healthz with Redis dead: %d", s)
	}

	rs.Restart(t)
	waitStoreOK(t, p)
	a := put(t, p.data, "/orders/1", "41")
	if a.status != 409 || a.problem["highWaterMark"] != "42" {
		t.Fatalf("41 after restart: %+v (the mark did not survive)", a)
	}
	if a := put(t, p.data, "/orders/1", "45"); a.status != 200 {
		t.Fatalf("45 after restart: %+v", a)
	}
	// The restart gave Redis a new run id: the program notices and says so.
	waitFor(t, "the master change to be noticed", func() bool {
		return strings.Contains(p.logs.String(), "redis server changed") &&
			strings.Contains(body(t, p.admin+"/metrics"), "fenceproxy_redis_master_changes_total 1")
	})
	if !strings.Contains(body(t, p.admin+"/metrics"), "fenceproxy_redis_master 1") {
		t.Fatal("fenceproxy_redis_master is not 1")
	}
}

func body(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Redis paused (SIGSTOP) past the store timeout: 503 within the bound,
// nothing forwarded, and service resumes on SIGCONT.
func TestRedisPausedFailsClosed(t *testing.T) {
	rs := redistest.Start(t)
	up := newCountingUpstream(t)
	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":  up.URL,
		"FENCE_REDIS_URL":     rs.URL(),
		"FENCE_STORE_TIMEOUT": "150ms",
	})
	if a := put(t, p.data, "/r", "7"); a.status != 200 {
		t.Fatalf("7: %+v", a)
	}
	rs.Stop()
	t0 := time.Now()
	a := put(t, p.data, "/r", "8")
	took := time.Since(t0)
	rs.Cont()
	if a.status != 503 {
		t.Fatalf("with Redis paused: %+v", a)
	}
	// Not a timing assertion on speed: a proxy that ignored the timeout would
	// hang for as long as Redis is stopped (forever, here).
	t.Logf("503 after %v with FENCE_STORE_TIMEOUT=150ms", took)
	if up.n.Load() != 1 {
		t.Fatalf("upstream received %d, want 1", up.n.Load())
	}
	waitFor(t, "admission after SIGCONT", func() bool { return put(t, p.data, "/r", "9").status == 200 })
	if a := put(t, p.data, "/r", "6"); a.status != 409 {
		t.Fatalf("6 after resume: %+v", a)
	}
}

// The embedded default store keeps marks across a restart of the program.
func TestBoltMarkSurvivesRestart(t *testing.T) {
	up := newCountingUpstream(t)
	env := map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_BOLT_PATH":    filepath.Join(t.TempDir(), "marks.db"),
	}
	p := start(t, env)
	if a := put(t, p.data, "/x", "42"); a.status != 200 {
		t.Fatalf("42: %+v", a)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p2 := start(t, env)
	if a := put(t, p2.data, "/x", "41"); a.status != 409 || a.problem["highWaterMark"] != "42" {
		t.Fatalf("41 after restart: %+v", a)
	}
}

func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(bad, []byte("routes:\n  - name: orders\n    path: /orders/{id}\n    resource: orders/{oid}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the error; none = success
	}{
		{"valid", map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000"}, nil},
		{"missing upstream", map[string]string{}, []string{"FENCE_UPSTREAM_URL"}},
		{"bad timeout and store", map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000",
			"FENCE_STORE_TIMEOUT": "soon", "FENCE_STORE": "etcd"}, []string{"FENCE_STORE_TIMEOUT", "FENCE_STORE"}},
		{"bad route", map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000", "FENCE_ROUTES_FILE": bad},
			[]string{"orders", "oid"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"check"}, tc.env, &out, &errOut)
			if len(tc.want) == 0 {
				if err != nil || !strings.Contains(out.String(), "configuration ok") {
					t.Fatalf("err %v out %q", err, out.String())
				}
				return
			}
			if err == nil {
				t.Fatal("check accepted a bad configuration")
			}
			if exitCode(err) != 1 {
				t.Fatalf("exit code %d", exitCode(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	if err := run(context.Background(), []string{"frobnicate"}, nil, io.Discard, io.Discard); exitCode(err) != 2 {
		t.Fatalf("unknown command: %v", err)
	}
}

// The built binary drains on SIGTERM: readiness turns 503, the in-flight
// request completes, and the process exits 0.
func TestSIGTERMDrainsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fenceproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	defer up.Close()

	// A FENCE_* variable of this process (FENCE_SKIP_REDIS=1 from make
	// test-short, say) is not the child's configuration, and an unknown one
	// would stop its start: withoutFenceVars keeps them from it.
	t.Setenv("FENCE_NOT_A_SETTING", "1")
	dataAddr, adminAddr := freePort(t), freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(withoutFenceVars(os.Environ()),
		"FENCE_UPSTREAM_URL="+up.URL, "FENCE_LISTEN_ADDR="+dataAddr, "FENCE_ADMIN_ADDR="+adminAddr,
		"FENCE_STORE=memory", "FENCE_SHUTDOWN_TIMEOUT=20s")
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFor(t, "listening", func() bool { return status(t, "http://"+adminAddr+"/healthz") == 200 })

	got := make(chan answer, 1)
	go func() { got <- put(t, "http://"+dataAddr, "/slow", "1") }()
	<-entered
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "draining", func() bool { return strings.Contains(logs.String(), "shutting down") })
	close(release)
	if a := <-got; a.status != 200 {
		t.Fatalf("in-flight request: %+v", a)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
}

// withoutFenceVars returns environ without its FENCE_* variables: the
// caller's are not the child's configuration, and an unknown one is fatal.
func withoutFenceVars(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "FENCE_") {
			out = append(out, kv)
		}
	}
	return out
}

// writeRoutes writes a routes file with the given YAML into a fresh
// directory and returns its path.
func writeRoutes(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// freePort returns a loopback address that was free a moment ago and that
// no other test of this process was given.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
