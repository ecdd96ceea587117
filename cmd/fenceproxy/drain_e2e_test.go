package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/childproc"
)

// The drain barrier across replicas, with real processes: two fenceproxy
// binaries on one redis-server in front of one upstream that can hold a
// request until the test releases it.

// storeUpstream is the protected service: it records when each request
// began (by token), keeps the body of the last write it finished per path
// (last write wins, as a naive service does), and holds a request with an
// X-Hold header until release is closed or the request is abandoned.
type storeUpstream struct {
	*httptest.Server
	arrivals chan string
	release  chan struct{}

	mu       sync.Mutex
	stored   map[string]string // path -> body of the last write finished
	received map[string]string // token -> body bytes read so far
}

func newStoreUpstream(t *testing.T) *storeUpstream {
	u := &storeUpstream{arrivals: make(chan string, 64), release: make(chan struct{}),
		stored: map[string]string{}, received: map[string]string{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("Fencing-Token")
		u.arrivals <- tok
		var body []byte
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			body = append(body, buf[:n]...)
			u.mu.Lock()
			u.received[tok] = string(body)
			u.mu.Unlock()
			if err == io.EOF {
				break
			}
			if err != nil {
				return // the proxy abandoned the request: nothing is stored
			}
		}
		if r.Header.Get("X-Hold") != "" {
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
		}
		u.mu.Lock()
		u.stored[r.URL.Path] = string(body)
		u.mu.Unlock()
		_, _ = io.WriteString(w, "stored")
	}))
	t.Cleanup(func() {
		u.releaseAll()
		u.Close()
	})
	return u
}

func (u *storeUpstream) releaseAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

func (u *storeUpstream) get(m map[string]string, k string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return m[k]
}

// arrives waits for the next request to begin at the upstream and checks
// its token.
func (u *storeUpstream) arrives(t *testing.T, want string, within time.Duration) time.Time {
	t.Helper()
	select {
	case got := <-u.arrivals:
		if got != want {
			t.Fatalf("upstream began token %s, want %s", got, want)
		}
		return time.Now()
	case <-time.After(within):
		t.Fatalf("token %s did not reach the upstream within %v", want, within)
	}
	return time.Time{}
}

func (u *storeUpstream) nothingArrives(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case got := <-u.arrivals:
		t.Fatalf("%s: token %s reached the upstream", why, got)
	case <-time.After(d):
	}
}

// replica is one fenceproxy process.
type replica struct {
	cmd         *exec.Cmd
	data, admin string
	logs        *syncBuffer
}

// buildBinary builds the program once for the calling test.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "fenceproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startReplica starts bin with env and args (none: serve) on loopback
// ports of its own, and waits until it is ready. It is stopped by its PID
// at the end of the test, continued first if the test stopped it.
func startReplica(t *testing.T, bin string, env map[string]string, args ...string) *replica {
	t.Helper()
	r := &replica{data: freePort(t), admin: freePort(t), logs: &syncBuffer{}}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Env = append(withoutFenceVars(os.Environ()), "FENCE_LISTEN_ADDR="+r.data, "FENCE_ADMIN_ADDR="+r.admin)
	for k, v := range env {
		r.cmd.Env = append(r.cmd.Env, k+"="+v)
	}
	r.cmd.Stderr = r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		if t.Failed() {
			t.Logf("replica %s logs:\n%s", r.data, r.logs)
		}
	})
	r.data, r.admin = "http://"+r.data, "http://"+r.admin
	waitFor(t, "replica ready", func() bool { return status(t, r.admin+"/readyz") == 200 })
	return r
}

// metric returns the value of one sample line of r's /metrics, or -1.
func (r *replica) metric(t *testing.T, sample string) float64 {
	t.Helper()
	text := body(t, r.admin+"/metrics")
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

type result struct {
	status int
	err    error
}

// sendPut sends a PUT with token (and X-Hold when hold) in the background.
func sendPut(base, path, token, payload string, hold bool) <-chan result {
	out := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("PUT", base+path, strings.NewReader(payload))
		req.Header.Set("Fencing-Token", token)
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- result{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- result{status: resp.StatusCode}
	}()
	return out
}

func wantStatus(t *testing.T, ch <-chan result, want int, what string) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.status != want {
			t.Fatalf("%s: status %d, err %v; want %d", what, r.status, r.err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30s", what)
	}
}

const drainRoutesYAML = `routes:
  - name: docs
    path: /docs/{id}
    resource: docs/{id}
`

func drainEnv(t *testing.T, redisURL, upstream, upstreamTimeout string) map[string]string {
	return map[string]string{
		"FENCE_UPSTREAM_URL":     upstream,
		"FENCE_REDIS_URL":        redisURL,
		"FENCE_ROUTES_FILE":      writeRoutes(t, drainRoutesYAML),
		"FENCE_UPSTREAM_TIMEOUT": upstreamTimeout,
	}
}

// Two replicas on one Redis: 42 through B is not forwarded while 41 through
// A is held in the upstream, and is forwarded right after 41 completes;
// another 41 never waits.
func TestDrainAcrossReplicas(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	up := newStoreUpstream(t)
	a := startReplica(t, bin, drainEnv(t, rs.URL(), up.URL, "20s"))
	b := startReplica(t, bin, drainEnv(t, rs.URL(), up.URL, "20s"))

	held := sendPut(a.data, "/docs/1", "41", "from 41", true)
	up.arrives(t, "41", 10*time.Second)

	wantStatus(t, sendPut(b.data, "/docs/1", "41", "41 again", false), 200, "an equal token through B")
	up.arrives(t, "41", time.Second)

	newer := sendPut(b.data, "/docs/1", "42", "from 42", false)
	up.nothingArrives(t, 700*time.Millisecond, "42 through B while 41 is held through A")

	releasedAt := time.Now()
	up.releaseAll()
	wantStatus(t, held, 200, "41 released")
	arrived := up.arrives(t, "42", 10*time.Second)
	wantStatus(t, newer, 200, "42")
	t.Logf("42 reached the upstream %v after 41 was released (wake through Redis pub/sub)", arrived.Sub(releasedAt))
	if got := up.get(up.stored, "/docs/1"); got != "from 42" {
		t.Fatalf("the upstream stored %q, want the newer write", got)
	}
	if w := b.metric(t, `fenceproxy_drain_total{outcome="waited",route="docs"}`); w != 1 {
		t.Fatalf("B: drain_total{outcome=waited} = %v, want 1", w)
	}
}

// A replica SIGKILLed, or SIGSTOPped, with a request in flight holds the
// barrier only for a bounded time (that request's upstream deadline, and
// at most the margin more): the newer request through the other replica
// then goes. The stopped replica,
// continued after its deadline, sends nothing more of its request.
func TestDrainDeadReplicaHoldsOnlyUntilDeadline(t *testing.T) {
	bin := buildBinary(t)
	const deadline = 2 * time.Second
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			rs := redistest.Start(t)
			up := newStoreUpstream(t)
			a := startReplica(t, bin, drainEnv(t, rs.URL(), up.URL, deadline.String()))
			b := startReplica(t, bin, drainEnv(t, rs.URL(), up.URL, "20s"))

			// 41 streams its body through A: the first part reaches the
			// upstream, then A is stopped or killed, and the client sends
			// the rest.
			conn, err := net.Dial("tcp", strings.TrimPrefix(a.data, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			admitted := time.Now()
			fmt.Fprintf(conn, "PUT /docs/1 HTTP/1.1\r\nHost: a\r\nFencing-Token: 41\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
			up.arrives(t, "41", 10*time.Second)
			waitFor(t, "the first part at the upstream", func() bool { return up.get(up.received, "41") == "first" })
			if err := a.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if sig == syscall.SIGSTOP {
				// SIGSTOP is delivered asynchronously: A can run on for a few
				// milliseconds after kill(2) returns, and would forward the
				// rest in time.
				if _, err := childproc.WaitStopped(a.cmd.Process.Pid, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			_, _ = fmt.Fprintf(conn, "6\r\nsecond\r\n0\r\n\r\n")

			newer := sendPut(b.data, "/docs/1", "42", "from 42", false)
			arrived := up.arrives(t, "42", 10*deadline)
			wantStatus(t, newer, 200, "42 through B")
			held := arrived.Sub(admitted)
			t.Logf("42 reached the upstream %v after 41 was admitted through A (deadline %v)", held, deadline)
			if held < deadline-100*time.Millisecond {
				t.Fatalf("42 went after %v, before 41's deadline %v", held, deadline)
			}
			if e := b.metric(t, `fenceproxy_drain_total{outcome="expired",route="docs"}`); e != 1 {
				t.Fatalf("B: drain_total{outcome=expired} = %v, want 1", e)
			}

			if sig == syscall.SIGSTOP {
				if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				// A wakes past the deadline: it must not send the rest.
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("41's answer from A after SIGCONT: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusGatewayTimeout {
					t.Fatalf("41 after SIGCONT: status %d, want 504", resp.StatusCode)
				}
			}
			time.Sleep(300 * time.Millisecond)
			if got := up.get(up.received, "41"); got != "first" {
				t.Fatalf("the upstream read %q of 41's body; the part sent after the freeze must not reach it", got)
			}
			if got := up.get(up.stored, "/docs/1"); got != "from 42" {
				t.Fatalf("the upstream stored %q, want the newer write", got)
			}
		})
	}
}

// The stalled-body story with a body too large to read before admission
// (96 KiB): 41 sends half and stalls, 42 is admitted through the other
// replica and waits at the barrier; 41's body completes and is applied,
// then 42's. The service ends with the newer write.
func TestDrainStalledStreamedBody(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	up := newStoreUpstream(t)
	a := startReplica(t, bin, drainEnv(t, rs.URL(), up.URL, "20s"))
	b := startReplica(t, bin, drainEnv(t, rs.URL(), up.URL, "20s"))

	const size = 96 << 10
	old := strings.Repeat("o", size)
	conn, err := net.Dial("tcp", strings.TrimPrefix(a.data, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /docs/9 HTTP/1.1\r\nHost: a\r\nFencing-Token: 41\r\nContent-Length: %d\r\n\r\n%s", size, old[:size/2])
	up.arrives(t, "41", 10*time.Second)

	newer := sendPut(b.data, "/docs/9", "42", "from 42", false)
	up.nothingArrives(t, 700*time.Millisecond, "42 while 41's body is still arriving")
	if _, err := io.WriteString(conn, old[size/2:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("41: %v %v", resp, err)
	}
	up.arrives(t, "42", 10*time.Second)
	wantStatus(t, newer, 200, "42")
	if got := up.get(up.stored, "/docs/9"); got != "from 42" {
		t.Fatalf("the upstream stored %d bytes of %q..., want the newer write", len(got), got[:min(len(got), 10)])
	}
}
