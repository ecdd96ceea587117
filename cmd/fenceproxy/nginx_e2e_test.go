package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/childproc"
	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// The authorization mode behind a real nginx: Debian's nginx (auth_request
// built in) runs deploy/nginx/example.conf, which includes
// deploy/nginx/fenceproxy.conf, in front of a recording upstream, and asks
// a real `fenceproxy authz` process (the binary, on a real redis-server, with
// signed tokens so that 401 and 403 can be seen too). Every answer a client
// can get is checked as the client gets it, and the upstream must receive
// exactly the allowed requests.

const nginxBin = "/usr/sbin/nginx"

// newNginxApp is the app behind nginx: it records every request it
// receives as "METHOD URI token=T body=B" (a signed token as "jws": its
// fence is what matters, and the test knows it by the body).
func newNginxApp(t *testing.T) *recorder[string] {
	return newRecorder(t, func(r *http.Request, b []byte) string {
		tok := r.Header.Get("Fencing-Token")
		if len(tok) > 12 {
			tok = "jws"
		}
		return fmt.Sprintf("%s %s token=%s body=%s", r.Method, r.URL.RequestURI(), tok, b)
	})
}

// startProc starts a child process in its own process group (internal/
// childproc) and ends it by its PID when the test ends.
func nginxStartProc(t *testing.T, name, bin string, args []string, env []string) *childproc.Proc {
	t.Helper()
	p := &childproc.Proc{Name: name, Bin: bin, Args: args, Env: env, Log: filepath.Join(t.TempDir(), name+".log"), KillWithParent: true}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Term(5 * time.Second)
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, p.LogTail(4000))
		}
	})
	return p
}

// nginxConfig writes a main configuration for nginx in dir that includes
// deploy/nginx/example.conf with its addresses replaced by the test's, and
// returns its path. The example must still contain what is replaced, so a
// change to it cannot silently make this test test something else.
//
// A second server, on plain, is what nginx's auth_request does without
// fenceproxy.conf's mapping (as ingress-nginx generates it from its auth-url
// annotation): the README of deploy/integrations/ingress-nginx says what a
// client sees there, and this shows it.
func nginxConfig(t *testing.T, dir, listen, plain, authz, app string) string {
	t.Helper()
	deployNginx, err := filepath.Abs(filepath.Join("..", "..", "deploy", "nginx"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(deployNginx, "example.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(example)
	for _, r := range [][2]string{
		{"listen 127.0.0.1:8000;", "listen " + listen + ";"},
		{"server 127.0.0.1:8081;", "server " + authz + ";"},
		{"server 127.0.0.1:3000;", "server " + app + ";"},
		{"include /etc/nginx/snippets/fenceproxy.conf;", "include " + filepath.Join(deployNginx, "fenceproxy.conf") + ";"},
	} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("deploy/nginx/example.conf no longer contains %q: update this test", r[0])
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "example.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	main := fmt.Sprintf(`worker_processes 1;
events { worker_connections 64; }
http {
    access_log %s;
    include %s;
    server {
        listen %s;
        location = /_plain_auth {
            internal;
            proxy_pass http://fenceproxy_authz;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Original-URI $request_uri;
        }
        location / {
            auth_request /_plain_auth;
            proxy_pass http://app;
        }
    }
}
`, filepath.Join(dir, "access.log"), filepath.Join(dir, "example.conf"), plain)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// nginxAnswer is what a client of nginx got.
type nginxAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a nginxAnswer) String() string {
	return fmt.Sprintf("%d %v %s", a.status, a.header, a.body)
}

func (a nginxAnswer) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %v", ct, a)
	}
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("the body is not JSON: %v: %s", err, a.body)
	}
	return m
}

func nginxSend(t *testing.T, method, url, token, body string, extra ...string) nginxAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return nginxAnswer{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestNginxAuthRequest(t *testing.T) {
	if _, err := os.Stat(nginxBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found: .ci/run installs it", nginxBin)
		}
		t.Skipf("%s not found (apt-get install -y nginx; .ci/run installs it): %v", nginxBin, err)
	}
	bin := buildBinary(t)
	dir := t.TempDir()

	// Signed tokens, so that 401 (token-invalid) and 403
	// (token-wrong-resource) are among the answers.
	priv, pub := filepath.Join(dir, "signing.jwk"), filepath.Join(dir, "keys.jwks")
	if out, err := exec.Command(bin, "token", "keygen", "--private", priv, "--public", pub).CombinedOutput(); err != nil {
		t.Fatalf("token keygen: %v\n%s", err, out)
	}
	sign := func(fence string, res ...string) string {
		t.Helper()
		args := []string{"token", "sign", "--key", priv, "--fence", fence, "--ttl", "10m"}
		if len(res) > 0 {
			args = append(args, "--res", res[0])
		}
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("token sign: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	routes := writeRoutes(t, `routes:
  - name: order-writes
    methods: [PUT, PATCH, DELETE]
    path: /orders/{orderID:uint}
    resource: orders/{orderID}
  - name: draft-writes            # dry run: decided and counted, never refused
    methods: [PUT]
    path: /drafts/{id:uint}
    resource: drafts/{id}
    enforce: false
  - name: health
    path: /health
    methods: [GET]
    fence: false
`)

	rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	authzAddr, adminAddr := freePort(t), freePort(t)
	fp := nginxStartProc(t, "fenceproxy-authz", bin, []string{"authz"}, append(withoutFenceVars(os.Environ()),
		"FENCE_LISTEN_ADDR="+authzAddr, "FENCE_ADMIN_ADDR="+adminAddr,
		"FENCE_REDIS_URL="+rs.URL(), "FENCE_STORE_TIMEOUT=200ms",
		"FENCE_ROUTES_FILE="+routes, "FENCE_TOKEN_KEYS_FILE="+pub))
	waitFor(t, "fenceproxy authz ready", func() bool { return status(t, "http://"+adminAddr+"/readyz") == 200 })

	app := newNginxApp(t)
	listen, plain := freePort(t), freePort(t)
	conf := nginxConfig(t, dir, listen, plain, authzAddr, strings.TrimPrefix(app.URL, "http://"))
	pidFile, errLog := filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "error.log")
	if out, err := exec.Command(nginxBin, "-t", "-p", dir, "-c", conf, "-e", errLog,
		"-g", "pid "+pidFile+";").CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	nginxStartProc(t, "nginx", nginxBin, []string{"-p", dir, "-c", conf, "-e", errLog,
		"-g", "daemon off; pid " + pidFile + "; error_log " + errLog + " info;"}, nil)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(errLog)
			t.Logf("nginx error.log:\n%s", b)
		}
	})
	waitFor(t, "nginx listening", func() bool {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	base := "http://" + listen

	// direct asks fenceproxy authz itself the question nginx asks for a
	// request: the client's answer must be this one, byte for byte.
	direct := func(method, uri, token string) nginxAnswer {
		t.Helper()
		return nginxSend(t, "GET", "http://"+authzAddr+"/_fenceproxy", token, "", "X-Original-Method", method, "X-Original-URI", uri)
	}
	refused := func(a nginxAnswer, status int, typ, decision string) map[string]any {
		t.Helper()
		if a.status != status {
			t.Fatalf("status %d, want %d: %v", a.status, status, a)
		}
		p := a.problem(t)
		if p["type"] != typ || p["status"] != float64(status) {
			t.Fatalf("problem %v, want type %s status %d", p, typ, status)
		}
		if got := a.header.Get("Fence-Decision"); got != decision {
			t.Errorf("Fence-Decision %q, want %q", got, decision)
		}
		if a.header.Get("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control %q, want no-store", a.header.Get("Cache-Control"))
		}
		return p
	}
	sameAsFenceproxy := func(a nginxAnswer, method, uri, token string) {
		t.Helper()
		d := direct(method, uri, token)
		if d.status != a.status || !bytes.Equal(d.body, a.body) {
			t.Errorf("the client got\n  %d %s\nfenceproxy answers\n  %d %s", a.status, a.body, d.status, d.body)
		}
	}

	t41, t42, t43 := sign("41"), sign("42"), sign("43")

	// Admitted: the writes reach the app.
	if a := nginxSend(t, "PUT", base+"/orders/42", t41, "from 41"); a.status != 200 || string(a.body) != "stored" {
		t.Fatalf("41: %v", a)
	}
	if a := nginxSend(t, "PUT", base+"/orders/42", t42, "from 42"); a.status != 200 {
		t.Fatalf("42: %v", a)
	}

	// 409: the late write of 41, with fenceproxy's problem.
	a := nginxSend(t, "PUT", base+"/orders/42", t41, "late 41")
	p := refused(a, 409, "urn:fenceproxy:stale-token", "stale")
	if p["highWaterMark"] != "42" || p["token"] != "41" || p["resource"] != "orders/42" {
		t.Errorf("409 problem: %v", p)
	}
	sameAsFenceproxy(a, "PUT", "/orders/42", t41)

	// Another spelling of a fenced path is refused: nginx passes the path on
	// as sent, and the app could read it otherwise than fenceproxy's
	// canonical form, so in the authorization mode only the canonical
	// spelling is fenced.
	a = nginxSend(t, "PUT", base+"/orders/7/../42", t41, "late 41, respelled")
	refused(a, 400, "urn:fenceproxy:bad-request", "bad_request")
	waitFor(t, "nginx to log the path as spelled", func() bool {
		log, _ := os.ReadFile(filepath.Join(dir, "access.log"))
		return strings.Contains(string(log), `"PUT /orders/7/../42 HTTP/1.1" 400`)
	})
	a = nginxSend(t, "PUT", base+"/orders//78/", t42, "respelled")
	refused(a, 400, "urn:fenceproxy:bad-request", "bad_request")

	// A client cannot name another request: its X-Original-* are replaced
	// by nginx's, its X-Forwarded-* removed. Asked as GET /health
	// (unfenced), this stale write would be allowed.
	a = nginxSend(t, "PUT", base+"/orders/42", t41, "late 41, disguised",
		"X-Original-Method", "GET", "X-Original-URI", "/health", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/health")
	refused(a, 409, "urn:fenceproxy:stale-token", "stale")

	// 428: no token.
	a = nginxSend(t, "PUT", base+"/orders/42", "", "no token")
	refused(a, 428, "urn:fenceproxy:token-required", "missing")
	sameAsFenceproxy(a, "PUT", "/orders/42", "")

	// 400: a path fenceproxy cannot read as one resource without guessing.
	a = nginxSend(t, "PUT", base+"/orders/042", t43, "leading zero")
	refused(a, 400, "urn:fenceproxy:bad-request", "bad_request")
	sameAsFenceproxy(a, "PUT", "/orders/042", t43)

	// 401: not a signed token (WWW-Authenticate passed on).
	a = nginxSend(t, "PUT", base+"/orders/42", "43", "plain number")
	refused(a, 401, "urn:fenceproxy:token-invalid", "invalid")
	if a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("401 without WWW-Authenticate: %v", a)
	}
	sameAsFenceproxy(a, "PUT", "/orders/42", "43")

	// 403: a signed token for other resources.
	other := sign("44", "invoices/*")
	a = nginxSend(t, "PUT", base+"/orders/42", other, "wrong resource")
	refused(a, 403, "urn:fenceproxy:token-wrong-resource", "wrong_resource")
	sameAsFenceproxy(a, "PUT", "/orders/42", other)

	// Unfenced reads pass.
	if a := nginxSend(t, "GET", base+"/orders/42", "", ""); a.status != 200 {
		t.Fatalf("GET: %v", a)
	}

	// A raw '#': nginx passes $request_uri with it to fenceproxy and sends
	// the app the path without it. Fenced as "/orders/42#x" it matched no
	// {orderID:uint} route, and the default rule admitted the stale token
	// on its own resource; now it is refused and nothing reaches the app.
	for _, target := range []string{"/orders/42#x", "/orders/42#/x"} {
		a = nginxSendRaw(t, listen, "PUT "+target+" HTTP/1.1\r\nHost: app\r\nFencing-Token: "+t41+"\r\nContent-Length: 5\r\n\r\nstale")
		refused(a, 400, "urn:fenceproxy:bad-request", "bad_request")
	}

	// A method override is fenced as the method it names: a POST the
	// framework applies as PUT is a stale write to order 42 (the default
	// rule, which fences POST, knew no mark of its own resource).
	a = nginxSend(t, "POST", base+"/orders/42", t41, "late 41, overridden", "X-HTTP-Method-Override", "PUT")
	refused(a, 409, "urn:fenceproxy:stale-token", "stale")
	a = nginxSend(t, "POST", base+"/orders/42?_method=PUT", t41, "late 41, overridden in the query")
	refused(a, 409, "urn:fenceproxy:stale-token", "stale")

	// Headers the app must never get from a client: asked even on a read,
	// and refused.
	for _, h := range []string{"Fence-Decision", "Fence-Problem", "X-Original-URL", "X-Rewrite-URL"} {
		a = nginxSend(t, "GET", base+"/orders/42", "", "", h, "admitted")
		refused(a, 400, "urn:fenceproxy:bad-request", "bad_request")
		a = nginxSend(t, "PUT", base+"/orders/42", t42, "with "+h, h, "admitted")
		refused(a, 400, "urn:fenceproxy:bad-request", "bad_request")
	}

	// A refusal is not an error of nginx: none of the refusals above was
	// logged as "auth request unexpected status".
	if log, _ := os.ReadFile(errLog); strings.Contains(string(log), "auth request unexpected status") {
		t.Errorf("nginx logged refusals as errors:\n%s", nginxGrep(string(log), "unexpected status"))
	}

	// A dry-run route: the stale write is decided (would_stale), counted,
	// and forwarded.
	if a := nginxSend(t, "PUT", base+"/drafts/7", sign("5"), "draft 5"); a.status != 200 {
		t.Fatalf("draft 5: %v", a)
	}
	if a := nginxSend(t, "PUT", base+"/drafts/7", sign("4"), "draft 4, stale"); a.status != 200 {
		t.Fatalf("draft 4 on a dry-run route: %v", a)
	}
	if m := body(t, "http://"+adminAddr+"/metrics"); !strings.Contains(m, `fenceproxy_requests_total{decision="would_stale",route="draft-writes"} 1`) {
		t.Errorf("the dry-run refusal is not counted as would_stale:\n%s", nginxGrep(m, "draft-writes"))
	}

	// Without the mapping (auth_request alone, as ingress-nginx has it):
	// 401 and 403 pass with nginx's own page, every other refusal is a 500,
	// and the client cannot tell a stale write from an outage.
	pbase := "http://" + plain
	if a := nginxSend(t, "PUT", pbase+"/orders/77", t42, "plain 42"); a.status != 200 {
		t.Fatalf("plain auth_request, admitted: %v", a)
	}
	for _, c := range []struct {
		token  string
		status int
	}{{t41, 500}, {"", 500}, {"43", 401}, {other, 403}} {
		a := nginxSend(t, "PUT", pbase+"/orders/77", c.token, "plain refused")
		if a.status != c.status || a.header.Get("Content-Type") == "application/problem+json" {
			t.Errorf("plain auth_request: %v, want %d and nginx's own page", a, c.status)
		}
	}

	// 503 store-unavailable: Redis is gone; fenceproxy's problem, with
	// Retry-After.
	rs.Kill()
	a = nginxSend(t, "PUT", base+"/orders/42", t43, "store down")
	p = refused(a, 503, "urn:fenceproxy:store-unavailable", "unavailable")
	if a.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After: %v", a)
	}
	if d := direct("PUT", "/orders/42", t43); d.status != 503 || d.header.Get("Fence-Problem") == "" {
		t.Errorf("fenceproxy itself: %v", d)
	} else {
		var dp map[string]any
		_ = json.Unmarshal(d.body, &dp)
		if dp["type"] != p["type"] || dp["title"] != p["title"] || dp["route"] != p["route"] || dp["resource"] != p["resource"] {
			t.Errorf("the client got %v, fenceproxy answers %v", p, dp)
		}
	}

	// fenceproxy authz gone: nginx answers 503 itself to what it must ask,
	// and forwards none of it (fail closed); reads are not asked, and flow.
	fp.Term(10 * time.Second)
	for _, r := range []struct{ method, path, token, override string }{
		{"PUT", "/orders/42", t43, ""}, {"DELETE", "/orders/42", t43, ""}, {"GET", "/orders/42", "", "DELETE"}} {
		var extra []string
		if r.override != "" {
			extra = []string{"X-HTTP-Method-Override", r.override}
		}
		a = nginxSend(t, r.method, base+r.path, r.token, "fenceproxy down", extra...)
		p = refused(a, 503, "urn:fenceproxy:store-unavailable", "")
		if a.header.Get("Retry-After") != "1" || !strings.Contains(fmt.Sprint(p["detail"]), "could not be asked") {
			t.Errorf("%s with fenceproxy down: %v", r.method, a)
		}
	}
	for _, method := range []string{"GET", "HEAD", "OPTIONS"} {
		if a := nginxSend(t, method, base+"/orders/42?page=2", "", ""); a.status != 200 {
			t.Errorf("%s with fenceproxy down: %v, want the app's answer", method, a)
		}
	}

	// The app received exactly what was allowed.
	want := []string{
		"PUT /orders/42 token=jws body=from 41",
		"PUT /orders/42 token=jws body=from 42",
		"GET /orders/42 token= body=",
		"PUT /drafts/7 token=jws body=draft 5",
		"PUT /drafts/7 token=jws body=draft 4, stale",
		"PUT /orders/77 token=jws body=plain 42",
		"GET /orders/42?page=2 token= body=",
		"HEAD /orders/42?page=2 token= body=",
		"OPTIONS /orders/42?page=2 token= body=",
	}
	if got := app.received(); !slices.Equal(got, want) {
		t.Errorf("the app received\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// nginxSendRaw writes raw, a whole request, to nginx at addr byte for byte
// (a Go client drops a fragment) and returns the answer.
func nginxSendRaw(t *testing.T, addr, raw string) nginxAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := wiretest.Answer(conn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return nginxAnswer{status: resp.StatusCode, header: resp.Header, body: b}
}

func nginxGrep(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
