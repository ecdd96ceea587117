package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
)

// demoRoutes gives each order its own mark.
const demoRoutes = `routes:
  - name: order-writes
    path: /orders/{orderID:uint}
    resource: orders/{orderID}
`

// demoUpstream is the protected service of the demo: it keeps the last body
// written to each path and remembers which tokens reached it.
type demoUpstream struct {
	mu       sync.Mutex
	state    map[string]string
	received []string
}

func (u *demoUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.Method != http.MethodGet {
		u.state[r.URL.Path] = string(body)
		u.received = append(u.received, fmt.Sprintf("%s %s token %s %q", r.Method, r.URL.Path, r.Header.Get("Fencing-Token"), body))
	}
	fmt.Fprintf(w, "%s\n", u.state[r.URL.Path])
}

// demo replays the story of the README against the real proxy (the serve
// path, on the embedded bbolt store in a temporary directory) with two
// clients that use the client package, then keeps serving until ctx ends so
// the reader can try it with curl (unless -once).
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	once := fs.Bool("once", false, "exit after the story instead of serving")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the demo proxy (falls back to a free port when busy)")
	pause := fs.Duration("pause", 1500*time.Millisecond, "how long A stays paused")
	if helped, err := parseFlags(fs, args, demoUsage, stdout); helped || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("demo takes no arguments, only flags\n%s", flagsUsage(fs, demoUsage))}
	}

	dir, err := os.MkdirTemp("", "fenceproxy-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(demoRoutes), 0o600); err != nil {
		return err
	}

	up := &demoUpstream{state: map[string]string{}}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upSrv := &http.Server{Handler: up, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = upSrv.Serve(upLn) }()
	defer upSrv.Close()

	cfg, err := loadConfig(map[string]string{
		"FENCE_UPSTREAM_URL": "http://" + upLn.Addr().String(),
		"FENCE_LISTEN_ADDR":  freeOr(*listen),
		"FENCE_ADMIN_ADDR":   "127.0.0.1:0",
		"FENCE_BOLT_PATH":    filepath.Join(dir, "marks.db"),
		"FENCE_ROUTES_FILE":  routes,
		"FENCE_LOG_LEVEL":    "warn",
	})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	addrs := make(chan [2]net.Addr, 1)
	served := make(chan error, 1)
	go func() {
		served <- serve(sctx, cfg, stderr, serveHooks{listening: func(d, a net.Addr) { addrs <- [2]net.Addr{d, a} }})
	}()
	var base, admin string
	select {
	case a := <-addrs:
		base, admin = "http://"+a[0].String(), "http://"+a[1].String()
	case err := <-served:
		return err
	}

	start := time.Now()
	say := func(who, format string, a ...any) {
		fmt.Fprintf(stdout, "  %6.3fs  %-8s %s\n", time.Since(start).Seconds(), who, fmt.Sprintf(format, a...))
	}
	fmt.Fprintf(stdout, "fenceproxy demo: fenceproxy on %s (embedded store %s) in front of an upstream on %s\n"+
		"admin port: %s/metrics (counters by route and decision), %s/readyz\n\n",
		base, cfg.BoltPath, upLn.Addr(), admin, admin)

	hc := &http.Client{Transport: &client.Transport{}, Timeout: 5 * time.Second}
	write := func(who string, token uint64, body string) {
		req, _ := http.NewRequestWithContext(client.WithToken(ctx, token), "PUT", base+"/orders/42", strings.NewReader(body))
		resp, err := hc.Do(req)
		var pe *client.ProblemError
		switch {
		case errors.As(err, &pe) && errors.Is(err, client.ErrStaleToken):
			say(who, "PUT /orders/42 %q with token %d -> %d stale: the mark is %d, so the upstream never sees it",
				body, token, pe.Status, pe.HighWaterMark)
		case err != nil:
			say(who, "PUT /orders/42 %q with token %d -> error: %v", body, token, err)
		default:
			resp.Body.Close()
			say(who, "PUT /orders/42 %q with token %d -> %d, forwarded", body, token, resp.StatusCode)
		}
	}

	say("lease", "grants orders/42 to A with token 41")
	write("A", 41, "A: ship 3 units")
	say("A", "prepares its next write, then pauses (a GC pause, SIGSTOP, a slow VM)")
	time.Sleep(*pause / 2)
	say("lease", "A's lease expires; grants orders/42 to B with token 42")
	write("B", 42, "B: ship 5 units")
	time.Sleep(*pause / 2)
	say("A", "resumes, still believing it holds the lease, and sends the write it prepared")
	write("A", 41, "A: cancel the order")

	up.mu.Lock()
	fmt.Fprintf(stdout, "\nThe upstream received %d writes:\n", len(up.received))
	for _, r := range up.received {
		fmt.Fprintf(stdout, "  %s\n", r)
	}
	paths := make([]string, 0, len(up.state))
	for p := range up.state {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	fmt.Fprintln(stdout, "Its final state:")
	for _, p := range paths {
		fmt.Fprintf(stdout, "  %s = %q\n", p, up.state[p])
	}
	up.mu.Unlock()

	if *once {
		stop()
		return <-served
	}
	fmt.Fprintf(stdout, "\nfenceproxy keeps serving on %s; try it (Ctrl-C to stop):\n"+
		"  curl -i -X PUT -H 'Fencing-Token: 41' -d late %s/orders/42    # 409: older than 42\n"+
		"  curl -i -X PUT -H 'Fencing-Token: 43' -d next %s/orders/42    # 200\n"+
		"  curl -i -X PUT -d none %s/orders/42                          # 428: no token\n"+
		"  curl -s %s/metrics | grep fenceproxy_requests_total     # what it decided\n",
		base, base, base, base, admin)
	return <-served
}

const demoUsage = "usage: fenceproxy demo [flags]\n\n" +
	"Replays the stale-lease story against a real fenceproxy (embedded store, toy upstream),\n" +
	"then keeps serving it until Ctrl-C.\n\nflags:"

// freeOr returns addr when it can be bound now, else a free loopback port.
func freeOr(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "127.0.0.1:0"
	}
	_ = ln.Close()
	return addr
}
