package extauthz

import (
	"context"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// harness is a Server on a real gRPC listener on the loopback, and a
// client of it.
type harness struct {
	srv    *Server
	fh     *fenceHandler
	logs   *observer.ObservedLogs
	client authv3.AuthorizationClient
	conn   *grpc.ClientConn
}

func start(t *testing.T) *harness {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	fh := newFenceHandler()
	srv := New(fh, zap.New(core))
	conn := serveOn(t, srv)
	return &harness{srv: srv, fh: fh, logs: logs, client: authv3.NewAuthorizationClient(conn), conn: conn}
}

// serveOn starts s on a gRPC server on the loopback and returns a client
// connection to it; both end with the test.
func serveOn(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-served
	})
	return conn
}

// envoyRequest is a CheckRequest shaped as Envoy sends it: lower-cased
// header names in the headers map, pseudo-headers among them, the
// request target (path and query, not decoded) in path.
type envoyRequest struct {
	id, method, path string
	headers          map[string]string // added to the defaults
	headerMap        [][2]string       // when set, sent as header_map (encode_raw_headers) instead
	host             string            // default orders.example:8443; "-" sends none
}

func (e envoyRequest) build() *authv3.CheckRequest {
	host := e.host
	switch host {
	case "":
		host = "orders.example:8443"
	case "-":
		host = ""
	}
	hr := &authv3.AttributeContext_HttpRequest{
		Id:       e.id,
		Method:   e.method,
		Path:     e.path,
		Host:     host,
		Scheme:   "https",
		Protocol: "HTTP/2",
		Size:     -1,
	}
	if e.headerMap != nil {
		hm := &corev3.HeaderMap{}
		for _, kv := range append(e.headerMap, [2]string{"x-request-id", e.id}) {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
		}
		hr.HeaderMap = hm
	} else {
		hr.Headers = map[string]string{
			":authority":        host,
			":method":           e.method,
			":path":             e.path,
			":scheme":           "https",
			"x-request-id":      e.id,
			"user-agent":        "client/1.0",
			"x-forwarded-proto": "https",
		}
		for k, v := range e.headers {
			hr.Headers[k] = v
		}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "192.0.2.10", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40123}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: hr},
	}}
}

// answer is a CheckResponse in the terms the tests compare.
type answer struct {
	grpcCode codes.Code
	ok       bool
	status   int                 // denied: the HTTP status
	headers  map[string][]string // ok: headers set upstream; denied: headers of the reply
	removed  []string            // ok: headers removed upstream
	body     string
}

func readAnswer(t *testing.T, resp *authv3.CheckResponse) answer {
	t.Helper()
	a := answer{grpcCode: codes.Code(resp.GetStatus().GetCode())}
	var opts []*corev3.HeaderValueOption
	switch hr := resp.GetHttpResponse().(type) {
	case *authv3.CheckResponse_OkResponse:
		a.ok = true
		opts = hr.OkResponse.GetHeaders()
		a.removed = hr.OkResponse.GetHeadersToRemove()
	case *authv3.CheckResponse_DeniedResponse:
		a.status = int(hr.DeniedResponse.GetStatus().GetCode())
		opts = hr.DeniedResponse.GetHeaders()
		a.body = hr.DeniedResponse.GetBody()
	default:
		t.Fatalf("http_response is %T", hr)
	}
	if len(opts) > 0 {
		a.headers = map[string][]string{}
	}
	for _, o := range opts {
		k := o.GetHeader().GetKey()
		if k != strings.ToLower(k) {
			t.Errorf("header name %q is not lower-case", k)
		}
		if o.Append != nil {
			t.Errorf("header %q sets the deprecated append", k)
		}
		wantAction := corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		if len(a.headers[k]) > 0 {
			wantAction = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
		if o.GetAppendAction() != wantAction {
			t.Errorf("header %q value %d: action %v, want %v", k, len(a.headers[k]), o.GetAppendAction(), wantAction)
		}
		a.headers[k] = append(a.headers[k], o.GetHeader().GetValue())
	}
	return a
}

func problemHeaders(decision string, extra ...string) map[string][]string {
	h := map[string][]string{
		"content-type":   {"application/problem+json"},
		"cache-control":  {"no-store"},
		"fence-decision": {decision},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = append(h[extra[i]], extra[i+1])
	}
	return h
}

func allowed(decision string) answer {
	return answer{grpcCode: codes.OK, ok: true, headers: map[string][]string{"fence-decision": {decision}}}
}

func denied(status int, code codes.Code, headers map[string][]string, body string) answer {
	return answer{grpcCode: code, status: status, headers: headers, body: body}
}

func badRequestAnswer(why malformed) answer {
	return denied(400, codes.PermissionDenied, problemHeaders("bad_request"),
		`{"type":"urn:fenceproxy:bad-request","title":"Bad Request","status":400,"detail":"`+string(why)+`"}`+"\n")
}

var (
	staleBody = problemBody(testProblem{Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409,
		Resource: "orders/1", Token: "3", HighWaterMark: "5"})
	malformedBody = problemBody(testProblem{Type: "urn:fenceproxy:token-malformed", Title: "Malformed fencing token", Status: 400})
	internalBody  = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the fencing decision failed; nothing was allowed"}` + "\n"
)

// TestCheck: every answer of the handler reaches Envoy as the matching
// CheckResponse, over a real gRPC connection.
func TestCheck(t *testing.T) {
	h := start(t)
	tests := []struct {
		name       string
		req        envoyRequest
		want       answer
		notHandled bool // the handler must not be asked
	}{
		{name: "admitted", req: envoyRequest{method: "PUT", path: "/orders/1?x=1", headers: map[string]string{"fencing-token": "5"}},
			want: allowed("admitted")},
		{name: "unfenced", req: envoyRequest{method: "GET", path: "/orders/1"}, want: allowed("unfenced")},
		{name: "dry run refusal is allowed", req: envoyRequest{method: "PUT", path: "/dry/1", headers: map[string]string{"fencing-token": "3"}},
			want: allowed("would_stale")},
		{name: "stale", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{"fencing-token": "3"}},
			want: denied(409, codes.PermissionDenied, problemHeaders("stale"), staleBody)},
		{name: "missing", req: envoyRequest{method: "PUT", path: "/orders/1"},
			want: denied(428, codes.PermissionDenied, problemHeaders("missing"),
				problemBody(testProblem{Type: "urn:fenceproxy:token-required", Title: "Fencing token required", Status: 428}))},
		{name: "unavailable", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{"fencing-token": "7"}},
			want: denied(503, codes.Unavailable, problemHeaders("unavailable", "retry-after", "1"),
				problemBody(testProblem{Type: "urn:fenceproxy:store-unavailable", Title: "Store unavailable", Status: 503}))},
		{name: "invalid signed token, two challenges", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{"fencing-token": "jws"}},
			want: denied(401, codes.PermissionDenied,
				problemHeaders("invalid", "www-authenticate", `Bearer error="invalid_token"`, "www-authenticate", `Fence realm="orders"`),
				problemBody(testProblem{Type: "urn:fenceproxy:token-invalid", Title: "Invalid fencing token", Status: 401}))},
		{name: "joined token in headers", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{"fencing-token": "5,6"}},
			want: denied(400, codes.PermissionDenied, problemHeaders("malformed"), malformedBody)},
		{name: "repeated token in header_map", req: envoyRequest{method: "PUT", path: "/orders/1",
			headerMap: [][2]string{{"fencing-token", "5"}, {"fencing-token", "6"}}},
			want: denied(400, codes.PermissionDenied, problemHeaders("malformed"), malformedBody)},
		{name: "header_map admitted", req: envoyRequest{method: "PUT", path: "/orders/1", headerMap: [][2]string{{"fencing-token", "5"}}},
			want: allowed("admitted")},

		// The bypass: the client names another path or method in the
		// headers of the HTTP form. Envoy's attributes win: still stale.
		{name: "client X-Original-URI and X-Original-Method are stripped", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{
			"fencing-token": "3", "x-original-uri": "/reports/1", "x-original-method": "GET"}},
			want: denied(409, codes.PermissionDenied, problemHeaders("stale"), staleBody)},
		{name: "client X-Forwarded-Uri and X-Forwarded-Method are stripped", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{
			"fencing-token": "3", "x-forwarded-uri": "/reports/1", "x-forwarded-method": "GET"}},
			want: denied(409, codes.PermissionDenied, problemHeaders("stale"), staleBody)},
		{name: "stripped in header_map, any case", req: envoyRequest{method: "PUT", path: "/orders/1", headerMap: [][2]string{
			{"fencing-token", "3"}, {"X-Original-URI", "/reports/1"}, {"x-original-uri", "/reports/2"}, {"X-FORWARDED-METHOD", "GET"}}},
			want: denied(409, codes.PermissionDenied, problemHeaders("stale"), staleBody)},
		{name: "client Fence-Decision is overwritten upstream", req: envoyRequest{method: "GET", path: "/reports/1", headers: map[string]string{
			"fence-decision": "admitted"}},
			want: allowed("unfenced")},
		{name: "no decision named: client's removed upstream", req: envoyRequest{method: "GET", path: "/silent", headers: map[string]string{
			"fence-decision": "admitted"}},
			want: answer{grpcCode: codes.OK, ok: true, removed: []string{"fence-decision"}}},
		{name: "headers changed after WriteHeader are not sent", req: envoyRequest{method: "GET", path: "/late-header"},
			want: denied(409, codes.PermissionDenied, map[string][]string{"fence-decision": {"stale"}}, `{}`)},
		{name: "status outside Envoy's enum", req: envoyRequest{method: "GET", path: "/odd-status"},
			want: denied(403, codes.PermissionDenied, map[string][]string{"fence-decision": {"odd"}}, "")},

		{name: "panic is denied 500", req: envoyRequest{method: "PUT", path: "/panic"},
			want: denied(500, codes.Unavailable, problemHeaders("error"), internalBody)},
		{name: "ErrAbortHandler is denied 500", req: envoyRequest{method: "PUT", path: "/abort"},
			want: denied(500, codes.Unavailable, problemHeaders("error"), internalBody)},
		{name: "still serving after the panics", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{"fencing-token": "5"}},
			want: allowed("admitted")},

		// CheckRequests that do not describe an HTTP request: 400, and the
		// handler is never asked.
		{name: "relative path", req: envoyRequest{method: "PUT", path: "orders/1"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "empty path", req: envoyRequest{method: "PUT", path: ""}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "absolute-form", req: envoyRequest{method: "PUT", path: "http://reports.example/orders/1"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "asterisk-form", req: envoyRequest{method: "OPTIONS", path: "*"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "space in path", req: envoyRequest{method: "PUT", path: "/orders/1 HTTP/1.1"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "fragment", req: envoyRequest{method: "PUT", path: "/reports/1#/orders/1"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "bad percent-encoding", req: envoyRequest{method: "PUT", path: "/orders/%zz"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "NUL in path", req: envoyRequest{method: "PUT", path: "/orders/1\x00"}, want: badRequestAnswer(errTarget), notHandled: true},
		{name: "empty method", req: envoyRequest{method: "", path: "/orders/1"}, want: badRequestAnswer(errMethod), notHandled: true},
		{name: "method with space", req: envoyRequest{method: "PU T", path: "/orders/1"}, want: badRequestAnswer(errMethod), notHandled: true},
		{name: "header value with newline", req: envoyRequest{method: "PUT", path: "/orders/1", headers: map[string]string{
			"fencing-token": "3\r\nfencing-token: 9"}}, want: badRequestAnswer(errHeader), notHandled: true},
		{name: "header name with colon", req: envoyRequest{method: "PUT", path: "/orders/1", headerMap: [][2]string{{"fencing-token:", "5"}}},
			want: badRequestAnswer(errHeader), notHandled: true},
		{name: "bad host", req: envoyRequest{method: "PUT", path: "/orders/1", host: "orders.example/evil"}, want: badRequestAnswer(errHost), notHandled: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.id = "req-" + string(rune('A'+i))
			resp, err := h.client.Check(context.Background(), tt.req.build())
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			got := readAnswer(t, resp)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("answer\n got %+v\nwant %+v", got, tt.want)
			}
			_, handled := h.fh.lookup(tt.req.id)
			if handled == tt.notHandled {
				t.Errorf("handler asked: %v, want %v", handled, !tt.notHandled)
			}
		})
	}

	if n := h.logs.FilterMessage("malformed check request").FilterField(zap.String("reason", string(errTarget))).Len(); n != 8 {
		t.Errorf("%d warnings for malformed targets, want 8", n)
	}
	panics := h.logs.FilterMessage("handler panicked; request denied").All()
	if len(panics) != 2 || panics[0].Level != zapcore.ErrorLevel {
		t.Fatalf("panic logs: %+v", panics)
	}
	if _, ok := panics[0].ContextMap()["stack"]; !ok {
		t.Error("a handler panic is logged without its stack")
	}
	if _, ok := panics[1].ContextMap()["stack"]; ok {
		t.Error("ErrAbortHandler is logged with a stack")
	}
}

// TestCheckRequestAsEnvoySentIt: method, target, query, host, headers,
// scheme, protocol and peer reach the handler as Envoy described them;
// the HTTP form's headers are Envoy's, whatever the client sent.
func TestCheckRequestAsEnvoySentIt(t *testing.T) {
	h := start(t)
	tests := []struct {
		name    string
		req     envoyRequest
		host    string
		headers http.Header // must be among what the handler saw
	}{
		{name: "headers map", req: envoyRequest{method: "PATCH", path: "/orders/1/items?b=2&a=%2F1&a=x", headers: map[string]string{
			"fencing-token": " 5 ", "x-tenant": "acme", "cookie": "a=1; b=2", "x-original-uri": "/reports/1", "x-forwarded-uri": "/reports/2",
			"x-original-method": "GET", "x-forwarded-method": "GET"}},
			host: "orders.example:8443",
			headers: http.Header{"Fencing-Token": {" 5 "}, "X-Tenant": {"acme"}, "Cookie": {"a=1; b=2"}, "User-Agent": {"client/1.0"},
				"X-Forwarded-Proto": {"https"}}},
		{name: "header_map, host from :authority", req: envoyRequest{method: "PATCH", path: "/orders/1/items?b=2&a=%2F1&a=x", host: "-", headerMap: [][2]string{
			{":authority", "orders.example"}, {":path", "/reports/1"}, {":method", "GET"}, {"fencing-token", "5"}, {"x-tenant", "acme"},
			{"x-tenant", "beta"}, {"X-Original-Uri", "/reports/1"}}},
			host:    "orders.example",
			headers: http.Header{"Fencing-Token": {"5"}, "X-Tenant": {"acme", "beta"}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.id = "seen-" + string(rune('A'+i))
			if _, err := h.client.Check(context.Background(), tt.req.build()); err != nil {
				t.Fatal(err)
			}
			s, ok := h.fh.lookup(tt.req.id)
			if !ok {
				t.Fatal("the handler was not asked")
			}
			const target = "/orders/1/items?b=2&a=%2F1&a=x"
			checks := []struct{ what, got, want string }{
				{"original method", s.method, "PATCH"},
				{"original URI", s.uri, target},
				{"r.Method", s.rMethod, "PATCH"},
				{"r.URL.RequestURI()", s.rURI, target},
				{"r.URL.Path", s.path, "/orders/1/items"},
				{"r.URL.RawQuery", s.rawQuery, "b=2&a=%2F1&a=x"},
				{"r.URL.Scheme", s.scheme, "https"},
				{"r.URL.Host", s.urlHost, tt.host},
				{"r.Host", s.host, tt.host},
				{"r.Proto", s.proto, "HTTP/2.0"},
				{"r.RemoteAddr", s.remoteAddr, "192.0.2.10:40123"},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
				}
			}
			for k, v := range tt.headers {
				if !reflect.DeepEqual(s.header[k], v) {
					t.Errorf("header %s = %q, want %q", k, s.header[k], v)
				}
			}
			for k, v := range map[string][]string{
				"X-Original-Uri": {target}, "X-Original-Method": {"PATCH"}, "X-Forwarded-Uri": nil, "X-Forwarded-Method": nil, "Host": nil,
			} {
				if !reflect.DeepEqual(s.header[k], v) {
					t.Errorf("header %s = %q, want %q", k, s.header[k], v)
				}
			}
			for k := range s.header {
				if strings.HasPrefix(k, ":") {
					t.Errorf("pseudo-header %s reached the handler", k)
				}
			}
			if s.body {
				t.Error("the handler read a body")
			}
		})
	}
}

// TestCheckDeadline: the gRPC deadline is the request's, and a call that
// is cancelled ends the handler's wait.
func TestCheckDeadline(t *testing.T) {
	h := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sent, _ := ctx.Deadline()
	if _, err := h.client.Check(ctx, envoyRequest{id: "deadline", method: "GET", path: "/"}.build()); err != nil {
		t.Fatal(err)
	}
	s, _ := h.fh.lookup("deadline")
	if !s.hasDeadline {
		t.Fatal("the handler's context has no deadline")
	}
	// gRPC sends the time left (rounded up to its unit), so the server's
	// deadline is the client's give or take the time in transit.
	if d := sent.Sub(s.deadline).Abs(); d > time.Second {
		t.Errorf("handler deadline %v, client's %v", s.deadline, sent)
	}

	// Without a deadline, the handler has none either.
	if _, err := h.client.Check(context.Background(), envoyRequest{id: "no-deadline", method: "GET", path: "/"}.build()); err != nil {
		t.Fatal(err)
	}
	if s, _ := h.fh.lookup("no-deadline"); s.hasDeadline {
		t.Errorf("deadline %v without one sent", s.deadline)
	}
}

// TestCheckCancellation: a call whose deadline passes ends the handler's
// wait on its request context.
func TestCheckCancellation(t *testing.T) {
	ended := make(chan error, 1)
	wait := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		ended <- r.Context().Err()
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	srv := New(wait, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	client := authv3.NewAuthorizationClient(serveOn(t, srv))
	_, err := client.Check(ctx, envoyRequest{method: "GET", path: "/"}.build())
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Check: %v, want DeadlineExceeded", err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Error("handler context ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end with the call")
	}
}

// TestHealth: the standard health service answers SERVING until Shutdown.
func TestHealth(t *testing.T) {
	h := start(t)
	hc := healthpb.NewHealthClient(h.conn)
	for _, svc := range []string{"", "envoy.service.auth.v3.Authorization"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, resp.GetStatus(), err)
		}
	}
	h.srv.Shutdown()
	for _, svc := range []string{"", "envoy.service.auth.v3.Authorization"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q after Shutdown: %v %v", svc, resp.GetStatus(), err)
		}
	}
}

// TestCheckConcurrent: many calls at once, for the race detector, each
// answered for its own request.
func TestCheckConcurrent(t *testing.T) {
	h := start(t)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token, want := "5", true
			if i%2 == 1 {
				token, want = "3", false
			}
			resp, err := h.client.Check(context.Background(), envoyRequest{method: "PUT", path: "/orders/1",
				headers: map[string]string{"fencing-token": token}}.build())
			if err != nil {
				t.Error(err)
				return
			}
			if got := resp.GetOkResponse() != nil; got != want {
				t.Errorf("token %s: allowed %v", token, got)
			}
		}()
	}
	wg.Wait()
}

// TestCheckNoHTTPAttributes: a CheckRequest without attributes.request.http
// (a network-filter call, or a broken client) is denied 400.
func TestCheckNoHTTPAttributes(t *testing.T) {
	h := start(t)
	for _, req := range []*authv3.CheckRequest{{}, {Attributes: &authv3.AttributeContext{}},
		{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{}}}} {
		resp, err := h.client.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readAnswer(t, resp), badRequestAnswer(errNoHTTP); !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	}
}

// TestCheckBodyCapped: an answer body past maxBody is cut there, and
// logged.
func TestCheckBodyCapped(t *testing.T) {
	h := start(t)
	resp, err := h.client.Check(context.Background(), envoyRequest{method: "GET", path: "/big"}.build())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetDeniedResponse().GetBody()); n != maxBody {
		t.Errorf("body of %d bytes, want %d", n, maxBody)
	}
	if h.logs.FilterMessage("handler answer body truncated").Len() != 1 {
		t.Error("truncation not logged")
	}
}

// TestRemoteAddr: Envoy's source socket address becomes r.RemoteAddr as
// host:port, an IPv6 host in brackets; no address, no RemoteAddr.
func TestRemoteAddr(t *testing.T) {
	peer := func(addr string, port uint32) *authv3.AttributeContext_Peer {
		return &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}},
		}}}
	}
	for _, tc := range []struct {
		src  *authv3.AttributeContext_Peer
		want string
	}{
		{peer("192.0.2.10", 40123), "192.0.2.10:40123"},
		{peer("2001:db8::1", 443), "[2001:db8::1]:443"},
		{peer("", 443), ""},
		{nil, ""},
	} {
		if got := remoteAddr(tc.src); got != tc.want {
			t.Errorf("remoteAddr(%v) = %q, want %q", tc.src, got, tc.want)
		}
	}
}
