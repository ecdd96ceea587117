// Command authzload is bench/authz.sh's closed-loop load: -c workers, each
// sending one fencing question, waiting for its answer and sending the next,
// for -d (then the questions in flight are answered, not cancelled, and the
// run's time includes them), against one of fenceproxy's two modes:
//
//	proxy  fenceproxy serve: PUT /r/k<n> with a 20-byte body (compare.sh's load), forwarded to the origin
//	http   fenceproxy authz, as nginx auth_request asks: GET / with X-Original-Method: PUT,
//	       X-Original-URI: /r/k<n>, Fencing-Token; no body
//	grpc   fenceproxy authz on FENCE_AUTHZ_GRPC_ADDR, as Envoy asks: Authorization/Check with
//	       attributes.request.http {method PUT, path /r/k<n>, host, headers {fencing-token}}
//	       over -grpc-conns HTTP/2 connections (Envoy keeps one per worker thread; 2 cores, 2)
//
//	authzload -target grpc -addr 127.0.0.1:28112 -c 32 -d 8s -resources 1000 -pid 12345
//
// Tokens: every request carries a fresh token, rising per resource. Worker w
// of C owns the resources n with n % C == w and visits them in turn; its
// tokens are <Unix seconds at the start><9-digit counter of the worker>, 19
// digits like bench/wrk/put.lua's, so a later run's tokens are above an
// earlier run's. So under the ">=" compare every request is admitted AND
// advances its resource's mark: in every mode each decision is the same
// admission, a store write of a new mark, as in compare.sh's load. (Equal
// tokens would be admitted too, but the Redis store writes a mark only when
// it moves, so they would measure less store work than that load does.)
//
// A decision counts when it is answered admitted (HTTP 200, gRPC Check with
// status OK); anything else (another status, a denial, a transport error) is
// an error, counted by kind. CPU: with -pid, the process's utime+stime from
// /proc/PID/stat (all its threads; USER_HZ ticks, 100 per second on Linux)
// before and after the run, divided by the decisions; the generator's own
// CPU (getrusage) likewise.
//
// Output on stdout, one line the script parses:
//
//	AUTHZLOAD target=grpc c=32 seconds=8.00 decisions=N errors=N rps=N p50_us=N p99_us=N cpu_us=N gen_cpu_us=N statuses=ok:N,...
//
// -check instead sends three questions about a resource of its own (token
// T+1, then T, then T+1 again) and exits 0 when they are answered admitted,
// refused 409, admitted.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const userHZ = 100 // /proc/PID/stat ticks per second (USER_HZ, fixed on Linux)

var body20 = []byte("twenty-byte-payload\n")

// asker asks one fencing question: may PUT <path> with this token go on?
// It returns "ok" when admitted, else what came back (a status, "denied:409",
// an error kind).
type asker func(ctx context.Context, path, token string) string

func main() {
	kind := flag.String("target", "", "proxy | http | grpc")
	addr := flag.String("addr", "", "host:port of fenceproxy (serve's listener for proxy, authz's HTTP or gRPC listener)")
	conc := flag.Int("c", 32, "concurrent workers (closed loop: one question in flight each)")
	dur := flag.Duration("d", 8*time.Second, "how long the workers ask")
	resources := flag.Int("resources", 1000, "resources /r/k0 .. /r/k<n-1>, split among the workers")
	pid := flag.Int("pid", 0, "fenceproxy's pid, for its CPU per decision (0: not measured)")
	grpcConns := flag.Int("grpc-conns", 2, "HTTP/2 connections for -target grpc (workers share them round robin)")
	check := flag.Bool("check", false, "functional check instead of load: fresh admitted, older refused 409, equal admitted")
	flag.Parse()
	if *addr == "" || *conc < 1 || *resources < *conc || *grpcConns < 1 {
		fail("want -addr, -c >= 1, -resources >= -c, -grpc-conns >= 1")
	}
	ask, closeFn, err := newAsker(*kind, *addr, *conc, *grpcConns)
	if err != nil {
		fail("%v", err)
	}
	defer closeFn()
	if *check {
		os.Exit(runCheck(ask))
	}
	run(ask, *kind, *conc, *dur, *resources, *pid)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "authzload: "+format+"\n", args...)
	os.Exit(2)
}

func newAsker(kind, addr string, conc, grpcConns int) (asker, func(), error) {
	switch kind {
	case "proxy", "http":
		tr := &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        conc,
			MaxIdleConnsPerHost: conc,
			DisableCompression:  true,
		}
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		if kind == "proxy" {
			base := "http://" + addr
			return func(ctx context.Context, path, token string) string {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+path, bytes.NewReader(body20))
				req.Header["Content-Type"] = []string{"application/octet-stream"}
				req.Header["Fencing-Token"] = []string{token}
				return doHTTP(client, req)
			}, tr.CloseIdleConnections, nil
		}
		url := "http://" + addr + "/"
		return func(ctx context.Context, path, token string) string {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Header["X-Original-Method"] = []string{http.MethodPut}
			req.Header["X-Original-Uri"] = []string{path}
			req.Header["Fencing-Token"] = []string{token}
			return doHTTP(client, req)
		}, tr.CloseIdleConnections, nil
	case "grpc":
		var clients []authv3.AuthorizationClient
		var conns []*grpc.ClientConn
		for range grpcConns { // each NewClient is a connection of its own
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, nil, err
			}
			conns = append(conns, cc)
			clients = append(clients, authv3.NewAuthorizationClient(cc))
		}
		closeAll := func() {
			for _, cc := range conns {
				_ = cc.Close()
			}
		}
		var next atomic.Uint64
		return func(ctx context.Context, path, token string) string {
			c := clients[next.Add(1)%uint64(len(clients))]
			resp, err := c.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
				Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
					Method: http.MethodPut, Path: path, Host: "app", Scheme: "http", Protocol: "HTTP/1.1",
					Headers: map[string]string{"fencing-token": token},
				}},
			}})
			switch {
			case err != nil:
				firstError(err)
				return "grpc-" + status.Code(err).String()
			case resp.GetStatus().GetCode() == int32(codes.OK):
				return "ok"
			default:
				return "denied:" + strconv.Itoa(int(resp.GetDeniedResponse().GetStatus().GetCode()))
			}
		}, closeAll, nil
	}
	return nil, nil, fmt.Errorf("-target must be proxy, http or grpc, not %q", kind)
}

func doHTTP(client *http.Client, req *http.Request) string {
	resp, err := client.Do(req)
	if err != nil {
		firstError(err)
		return "http-error"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return "ok"
	}
	return strconv.Itoa(resp.StatusCode)
}

var errOnce sync.Once

// firstError prints the first transport error of the run on stderr.
func firstError(err error) {
	errOnce.Do(func() { fmt.Fprintf(os.Stderr, "authzload: first error: %v\n", err) })
}

func runCheck(ask asker) int {
	ctx := context.Background()
	path := fmt.Sprintf("/r/check-%d-%d", os.Getpid(), time.Now().UnixNano())
	t := uint64(time.Now().Unix()) * 1e9
	fresh, older := strconv.FormatUint(t+2, 10), strconv.FormatUint(t+1, 10)
	got := []string{ask(ctx, path, fresh), ask(ctx, path, older), ask(ctx, path, fresh)}
	want := []string{"ok", "409", "ok"}
	if got[1] == "denied:409" {
		got[1] = "409"
	}
	if slices.Equal(got, want) {
		fmt.Println("ok")
		return 0
	}
	fmt.Printf("FAIL(fresh:%s/ok,older:%s/409,equal:%s/ok)\n", got[0], got[1], got[2])
	return 1
}

// worker results: admitted count, latencies of the admitted, other outcomes
type tally struct {
	ok    int
	lat   []time.Duration
	other map[string]int
}

func run(ask asker, kind string, conc int, dur time.Duration, resources, pid int) {
	epoch := uint64(time.Now().Unix()) * 1e9
	tallies := make([]tally, conc)
	cpu0, ok0 := procCPU(pid)
	gen0 := selfCPU()
	ctx := context.Background()
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			t := &tallies[w]
			t.other = map[string]int{}
			slots := (resources-1-w)/conc + 1 // resources n with n % conc == w
			// no new question after stop; the ones in flight are answered and
			// counted (nothing is cancelled), and the run lasts until they are
			for seq := uint64(1); time.Now().Before(stop); seq++ {
				n := w + int((seq-1)%uint64(slots))*conc
				path := "/r/k" + strconv.Itoa(n)
				token := strconv.FormatUint(epoch+seq, 10)
				t0 := time.Now()
				out := ask(ctx, path, token)
				if out == "ok" {
					t.ok++
					t.lat = append(t.lat, time.Since(t0))
				} else {
					t.other[out]++
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu1, ok1 := procCPU(pid)
	gen1 := selfCPU()

	var decisions, errs int
	var lat []time.Duration
	other := map[string]int{}
	for _, t := range tallies {
		decisions += t.ok
		lat = append(lat, t.lat...)
		for k, v := range t.other {
			other[k] += v
			errs += v
		}
	}
	slices.Sort(lat)
	pct := func(p float64) int64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()
	}
	perDecision := func(seconds float64) string {
		if decisions == 0 {
			return "-"
		}
		return strconv.FormatFloat(seconds*1e6/float64(decisions), 'f', 1, 64)
	}
	cpuUs := "-"
	if ok0 && ok1 {
		cpuUs = perDecision(float64(cpu1-cpu0) / userHZ)
	}
	statuses := []string{"ok:" + strconv.Itoa(decisions)}
	for _, k := range slices.Sorted(maps.Keys(other)) {
		statuses = append(statuses, k+":"+strconv.Itoa(other[k]))
	}
	fmt.Printf("AUTHZLOAD target=%s c=%d seconds=%.2f decisions=%d errors=%d rps=%.0f p50_us=%d p99_us=%d cpu_us=%s gen_cpu_us=%s statuses=%s\n",
		kind, conc, secs, decisions, errs, float64(decisions)/secs, pct(0.50), pct(0.99), cpuUs,
		perDecision((gen1 - gen0).Seconds()), strings.Join(statuses, ","))
}

// procCPU is utime+stime of process pid in ticks (all its threads).
func procCPU(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// the fields after the command name, which is in parentheses and may hold spaces
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 { // f[0] is field 3 (state): utime is field 14, stime 15
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	return u + s, err1 == nil && err2 == nil
}

// selfCPU is the generator's own user+system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
