package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// routesYAML fences POST /ge/{id} with ">=" and POST /gt/{id} with ">"
// against one resource per id, so that both compares act on the same marks;
// and POST /sq/{id} with ">=" and optional sequences against resources of
// their own (the locale scenario's).
const routesYAML = `routes:
  - name: sq
    methods: [POST]
    path: /sq/{id}
    resource: seq/{id}
    sequence: optional
  - name: ge
    methods: [POST]
    path: /ge/{id}
    resource: res/{id}
  - name: gt
    methods: [POST]
    path: /gt/{id}
    resource: res/{id}
    compare: ">"
default:
  fence: false
`

// Replica is one fenceproxy process: the built binary, configured only by
// its environment.
type Replica struct {
	*Proc
	Index     int
	DataAddr  string
	AdminAddr string
}

// URL returns the data plane's base URL.
func (r *Replica) URL() string { return "http://" + r.DataAddr }

// startProxy starts fenceproxy replica i with env (FENCE_* only; the
// listen and admin addresses, routes file, log level and upstream are set
// here) and waits until it serves /healthz, and /readyz when ready is set.
func (h *Harness) startProxy(i int, upstream string, env map[string]string, ready bool) (*Replica, error) {
	dir, err := mkdir(h.dir, fmt.Sprintf("fenceproxy%d", i))
	if err != nil {
		return nil, err
	}
	routes := filepath.Join(h.dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(routesYAML), 0o644); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		dp, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ap, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		r := &Replica{Index: i, DataAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(dp)),
			AdminAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ap))}
		e := map[string]string{
			"FENCE_UPSTREAM_URL":     upstream,
			"FENCE_LISTEN_ADDR":      r.DataAddr,
			"FENCE_ADMIN_ADDR":       r.AdminAddr,
			"FENCE_ROUTES_FILE":      routes,
			"FENCE_LOG_LEVEL":        "warn",
			"FENCE_SHUTDOWN_TIMEOUT": "2s",
			"FENCE_BOLT_PATH":        filepath.Join(dir, "fenceproxy.db"),
			// /readyz follows the store, so that "ready" below means the
			// store answers before load starts, and the store-loss
			// scenarios can read a replica's verdict from it.
			"FENCE_READY_REQUIRES_STORE": "true",
		}
		for k, v := range env {
			e[k] = v
		}
		r.Proc = &Proc{Name: fmt.Sprintf("fenceproxy%d", i), Bin: h.bin, Dir: dir,
			Env: procEnv(e), Log: filepath.Join(dir, "fenceproxy.log"), KillWithParent: true}
		if lastErr = h.launchReplica(r, ready); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

// procEnv is the harness's environment without any FENCE_ variable of the
// caller's, plus e.
func procEnv(e map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") {
			out = append(out, kv)
		}
	}
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

func (h *Harness) launchReplica(r *Replica, ready bool) error {
	if err := r.Start(); err != nil {
		return err
	}
	h.procs.add(r.Proc)
	if err := r.waitUp(ready); err != nil {
		r.Term(time.Second)
		return err
	}
	return nil
}

func (r *Replica) waitUp(ready bool) error {
	path := "/healthz"
	if ready {
		path = "/readyz"
	}
	return waitFor(r.Proc, 15*time.Second, r.Name+" "+path, func() error {
		code, body, err := adminGet(r.AdminAddr, path)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("%s: %d %s", path, code, body)
		}
		return nil
	})
}

// Restart starts the replica again on the same ports (after Kill, or to
// replace a running one) and waits for /healthz.
func (r *Replica) Restart() error {
	r.Term(2 * time.Second)
	if err := r.Start(); err != nil {
		return err
	}
	return r.waitUp(false)
}

func adminGet(addr, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	resp, err := adminClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

var adminClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Memory is a replica's memory use at one moment.
type Memory struct {
	RSSKiB     int64 // VmRSS of /proc/<pid>/status
	HeapInuse  int64 // go_memstats_heap_inuse_bytes
	Goroutines int64 // go_goroutines
}

// Memory reads the replica's RSS and its runtime metrics.
func (r *Replica) Memory() (Memory, error) {
	var m Memory
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", r.Pid()))
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			m.RSSKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	code, body, err := adminGet(r.AdminAddr, "/metrics")
	if err != nil {
		return m, err
	}
	if code != 200 {
		return m, fmt.Errorf("/metrics: %d", code)
	}
	for line := range strings.Lines(body) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.HeapInuse = int64(f)
		case "go_goroutines":
			m.Goroutines = int64(f)
		}
	}
	return m, nil
}
