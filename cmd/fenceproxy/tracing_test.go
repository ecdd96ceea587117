package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/fenceproxy/fenceproxy/config"
)

// The client's trace: every traced request below continues it.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// clearOTEL unsets every OTEL_* variable of the process for the test, so
// that a developer's own settings do not leak in.
func clearOTEL(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "") // restored after the test
			_ = os.Unsetenv(k)
		}
	}
}

// OTEL_* decide whether tracing is on; a value fenceproxy cannot honour
// stops the start with an error naming the variable.
func TestTracingFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string // a substring of the error; "" for none
	}{
		{name: "unset: none (autoexport alone would pick otlp)", env: nil},
		{name: "empty", env: map[string]string{"OTEL_TRACES_EXPORTER": ""}},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{name: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, on: true},
		{name: "otlp over grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, on: true},
		{name: "SDK disabled", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}},
		{name: "sampler always_off is still on (the wiring, nothing recorded)",
			env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "always_off"}, on: true},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, wantErr: `OTEL_TRACES_EXPORTER: unknown exporter "jaeger"`},
		{name: "a list of exporters", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "unknown otlp protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
			wantErr: "OTEL_TRACES_EXPORTER=otlp"},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "sometimes"},
			wantErr: `OTEL_TRACES_SAMPLER: unknown sampler "sometimes"`},
		{name: "ratio out of range", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "resource attribute without a value", env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_RESOURCE_ATTRIBUTES": "team"},
			wantErr: "OTEL_RESOURCE_ATTRIBUTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearOTEL(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			tr, err := startTracing(t.Context(), zap.NewNop(), nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.shutdown()
			if tr.on() != tt.on {
				t.Fatalf("tracing on = %v, want %v", tr.on(), tt.on)
			}
			if tt.on {
				return
			}
			// Off: nothing is wrapped, so a request costs what it did
			// without tracing.
			h, rt := new(http.ServeMux), new(http.Transport)
			if tr.provider() != nil || tr.handler(h) != http.Handler(h) || tr.transport(rt) != http.RoundTripper(rt) || tr.grpcOptions() != nil {
				t.Fatal("off, yet the proxy gets a tracer provider, or the handler, the transport or the gRPC server is wrapped")
			}
		})
	}
}

// The start of the program itself fails on an unknown exporter, with an
// error that names the variable (and exit status 1).
func TestUnknownExporterStopsTheStart(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	err := run(t.Context(), []string{"serve"}, map[string]string{
		"FENCE_UPSTREAM_URL": "http://127.0.0.1:1", "FENCE_STORE": "memory",
		"FENCE_LISTEN_ADDR": "127.0.0.1:0", "FENCE_ADMIN_ADDR": "127.0.0.1:0",
	}, &syncBuffer{}, &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") || exitCode(err) != 1 {
		t.Fatalf("run: %v (exit %d), want a start error naming OTEL_TRACES_EXPORTER", err, exitCode(err))
	}
}

// traceUpstream records the headers (trace context, request id) of every
// request.
type traceUpstream = recorder[http.Header]

func newTraceUpstream(t *testing.T) *traceUpstream {
	return newRecorder(t, func(r *http.Request, _ []byte) http.Header { return r.Header.Clone() })
}

// last is the last request received; the test fails if there is none.
func (u *recorder[T]) last(t *testing.T) T {
	t.Helper()
	got := u.received()
	if len(got) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return got[len(got)-1]
}

// send sends method path with token and the extra header pairs, and
// returns the status and the response's headers.
func send(t *testing.T, method, url, token string, headers ...string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("x"))
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// spansOf returns the ended spans named name.
func spansOf(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func oneSpan(t *testing.T, exp *tracetest.InMemoryExporter, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	// A server span ends once its handler has returned, which can be
	// after the client has read the answer: wait for it a while.
	ss := spansOf(exp, name)
	for deadline := time.Now().Add(5 * time.Second); len(ss) == 0 && time.Now().Before(deadline); ss = spansOf(exp, name) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(ss) != 1 || ss[0].SpanKind != kind {
		t.Fatalf("%d spans named %q (want one of kind %v); all: %v", len(ss), name, kind, spanNames(exp))
	}
	return ss[0]
}

func spanNames(exp *tracetest.InMemoryExporter) []string {
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name+"("+s.SpanKind.String()+")")
	}
	return names
}

func attrs(s tracetest.SpanStub) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// wantAttrs fails unless s has every attribute of want, with its value.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if got[attribute.Key(k)] != v {
			t.Errorf("%s: %s = %q, want %q (all: %v)", s.Name, k, got[attribute.Key(k)], v, got)
		}
	}
}

// childOf fails unless child's parent is parent, in one trace.
func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("%s's parent is %s, want %s (%s)", child.Name, child.Parent.SpanID(), parent.SpanContext.SpanID(), parent.Name)
	}
}

// logLines returns the JSON log lines whose msg is msg.
func logLines(t *testing.T, logs string, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// With tracing on, one request through the real program gives three spans
// in the client's trace: the server span (a child of the client's span),
// fence.admit and the upstream exchange (children of the server span); the
// upstream receives a traceparent in that trace whose parent is the
// upstream span. A stale refusal's fence.admit says stale and the mark.
// Every log line carries request_id, trace_id and span_id.
func TestTracingEndToEnd(t *testing.T) {
	clearOTEL(t)
	exp := tracetest.NewInMemoryExporter()
	up := newTraceUpstream(t)
	routes := writeRoutes(t, "routes:\n  - {name: orders, path: '/orders/{id}', resource: 'orders/{id}'}\n")
	p := startWith(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE": "memory", "FENCE_ROUTES_FILE": routes},
		serveHooks{spanExporter: exp})

	status, h := send(t, "PUT", p.data+"/orders/7", "41", "Traceparent", clientParent, "X-Request-Id", "req-41")
	if status != 200 || h.Get("X-Request-Id") != "req-41" {
		t.Fatalf("41: %d, X-Request-Id %q", status, h.Get("X-Request-Id"))
	}
	server := oneSpan(t, exp, "PUT", trace.SpanKindServer)
	admit := oneSpan(t, exp, "fence.admit", trace.SpanKindInternal)
	upstream := oneSpan(t, exp, "upstream PUT", trace.SpanKindClient)
	if server.SpanContext.TraceID().String() != clientTraceID || server.Parent.SpanID().String() != clientSpanID || !server.Parent.IsRemote() {
		t.Errorf("server span in trace %s with parent %s, want the client's %s %s",
			server.SpanContext.TraceID(), server.Parent.SpanID(), clientTraceID, clientSpanID)
	}
	childOf(t, admit, server)
	childOf(t, upstream, server)
	wantAttrs(t, admit, map[string]string{"fence.route": "orders", "fence.resource": "orders/7", "fence.token": "41",
		"fence.decision": "admitted", "fence.mark": "41", "fence.drain": "none"})
	wantAttrs(t, server, map[string]string{"fence.route": "orders", "fence.decision": "admitted"})
	if _, ok := attrs(admit)["fence.drain_wait_ms"]; ok {
		t.Error("fence.drain_wait_ms on a request that did not wait")
	}
	if admit.EndTime.After(upstream.StartTime) {
		t.Error("fence.admit ends after the upstream exchange began: the forward is not part of the admission")
	}
	if name, _ := server.Resource.Set().Value("service.name"); name.Emit() != "fenceproxy" {
		t.Errorf("resource service.name %q, want fenceproxy", name.Emit())
	}

	seen := up.last(t)
	tp := strings.Split(seen.Get("Traceparent"), "-")
	if len(tp) != 4 || tp[1] != clientTraceID || tp[2] != upstream.SpanContext.SpanID().String() {
		t.Errorf("upstream traceparent %q, want trace %s and parent %s (the upstream span)",
			seen.Get("Traceparent"), clientTraceID, upstream.SpanContext.SpanID())
	}
	if seen.Get("X-Request-Id") != "req-41" {
		t.Errorf("upstream X-Request-Id %q, want the client's req-41", seen.Get("X-Request-Id"))
	}
	admitted := logLines(t, p.logs.String(), "admitted")
	if len(admitted) != 1 || admitted[0]["request_id"] != "req-41" || admitted[0]["trace_id"] != clientTraceID ||
		admitted[0]["span_id"] != server.SpanContext.SpanID().String() {
		t.Errorf("admitted log lines %v, want one with request_id req-41, trace_id %s, span_id %s",
			admitted, clientTraceID, server.SpanContext.SpanID())
	}

	// Stale: fence.admit says so, with the mark; nothing goes upstream.
	exp.Reset()
	status, h = send(t, "PUT", p.data+"/orders/7", "40", "Traceparent", clientParent)
	if status != 409 {
		t.Fatalf("40 after 41: %d", status)
	}
	admit = oneSpan(t, exp, "fence.admit", trace.SpanKindInternal)
	wantAttrs(t, admit, map[string]string{"fence.decision": "stale", "fence.mark": "41", "fence.token": "40"})
	if n := len(spansOf(exp, "upstream PUT")); n != 0 {
		t.Errorf("%d upstream spans for a refusal", n)
	}
	id := h.Get("X-Request-Id")
	refused := logLines(t, p.logs.String(), "refused")
	if len(id) != 16 || len(refused) != 1 || refused[0]["request_id"] != id || refused[0]["trace_id"] != clientTraceID {
		t.Errorf("refusal: X-Request-Id %q, log lines %v; want a generated id on the answer and the line, and the trace id", id, refused)
	}

	// Not fenced: no admission span, the server and upstream spans only.
	exp.Reset()
	if status, _ := send(t, "GET", p.data+"/orders/7", ""); status != 200 {
		t.Fatalf("GET: %d", status)
	}
	if n := len(spansOf(exp, "fence.admit")); n != 0 {
		t.Errorf("%d admission spans for an unfenced GET", n)
	}
	wantAttrs(t, oneSpan(t, exp, "GET", trace.SpanKindServer), map[string]string{"fence.decision": "unfenced"})
	oneSpan(t, exp, "upstream GET", trace.SpanKindClient)
}

// With tracing off (OTEL_TRACES_EXPORTER unset), fenceproxy adds no
// traceparent to the upstream request, and passes a client's untouched.
func TestTracingOffAddsNoTraceparent(t *testing.T) {
	clearOTEL(t)
	up := newTraceUpstream(t)
	p := startWith(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE": "memory"}, serveHooks{})

	if status, _ := send(t, "PUT", p.data+"/a", "1"); status != 200 {
		t.Fatal(status)
	}
	if got := up.last(t); got.Get("Traceparent") != "" || got.Get("Tracestate") != "" {
		t.Fatalf("tracing off, yet the upstream got traceparent %q", got.Get("Traceparent"))
	}
	if status, _ := send(t, "PUT", p.data+"/a", "2", "Traceparent", clientParent, "Tracestate", "vendor=1"); status != 200 {
		t.Fatal(status)
	}
	if got := up.last(t); got.Get("Traceparent") != clientParent || got.Get("Tracestate") != "vendor=1" {
		t.Fatalf("the client's traceparent %q / tracestate %q reached the upstream as %q / %q",
			clientParent, "vendor=1", got.Get("Traceparent"), got.Get("Tracestate"))
	}
	if strings.Contains(p.logs.String(), "trace_id") {
		t.Fatal("tracing off, yet a log line has a trace_id")
	}
}

// OTEL_TRACES_EXPORTER=console prints the spans on standard output, with
// the resource (service.name from OTEL_SERVICE_NAME), and SIGTERM flushes
// them: the batch would not have been exported yet (every 5 s) when the
// program stops right after the request.
func TestTracingConsolePrintsSpans(t *testing.T) {
	clearOTEL(t)
	bin := buildBinary(t)
	up := newTraceUpstream(t)
	data, admin := freePort(t), freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(withoutFenceVars(os.Environ()), "FENCE_LISTEN_ADDR="+data, "FENCE_ADMIN_ADDR="+admin,
		"FENCE_UPSTREAM_URL="+up.URL, "FENCE_STORE=memory", "OTEL_TRACES_EXPORTER=console", "OTEL_SERVICE_NAME=orders-sidecar")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, "ready", func() bool { return status(t, "http://"+admin+"/readyz") == 200 })
	if status, _ := send(t, "PUT", "http://"+data+"/a", "1"); status != 200 {
		t.Fatal(status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{`"Name":"fence.admit"`, `"Name":"upstream PUT"`, `"Name":"PUT"`, `"Value":"orders-sidecar"`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("console output lacks %s:\n%.3000s\nlogs:\n%s", want, stdout.String(), stderr.String())
		}
	}
}

// startAuthz is startWith for fenceproxy authz, with a gRPC listener.
func startAuthz(t *testing.T, env map[string]string, hooks serveHooks) (*program, string) {
	t.Helper()
	grpcAddr := freePort(t)
	full := map[string]string{"FENCE_STORE": "memory", "FENCE_AUTHZ_GRPC_ADDR": grpcAddr}
	for k, v := range env {
		full[k] = v
	}
	return startLoaded(t, config.LoadAuthz, full, hooks), grpcAddr
}

// In the authorization mode, the HTTP question's server span continues the
// trace of its headers and the gRPC Check's continues the trace of the
// call's metadata (otelgrpc); fence.admit is a child of either. The
// question's X-Request-Id comes back.
func TestTracingAuthz(t *testing.T) {
	clearOTEL(t)
	exp := tracetest.NewInMemoryExporter()
	routes := writeRoutes(t, "routes:\n  - {name: orders, path: '/orders/{id}', resource: 'orders/{id}'}\n")
	p, grpcAddr := startAuthz(t, map[string]string{"FENCE_ROUTES_FILE": routes}, serveHooks{spanExporter: exp})

	status, h := send(t, "GET", p.data+"/auth", "5", "X-Original-Method", "PUT", "X-Original-URI", "/orders/1",
		"Traceparent", clientParent, "X-Request-Id", "nginx-req-1")
	if status != 200 || h.Get("X-Request-Id") != "nginx-req-1" {
		t.Fatalf("question: %d, X-Request-Id %q", status, h.Get("X-Request-Id"))
	}
	server := oneSpan(t, exp, "GET", trace.SpanKindServer)
	admit := oneSpan(t, exp, "fence.admit", trace.SpanKindInternal)
	if server.Parent.SpanID().String() != clientSpanID {
		t.Errorf("authz server span's parent %s, want the client's %s", server.Parent.SpanID(), clientSpanID)
	}
	childOf(t, admit, server)
	wantAttrs(t, admit, map[string]string{"fence.decision": "admitted", "fence.resource": "orders/1", "fence.mark": "5"})

	// gRPC: Envoy's ext_authz call carries the trace in its metadata.
	exp.Reset()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const envoySpanID = "b7ad6b7169203331"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+clientTraceID+"-"+envoySpanID+"-01")
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "envoy-req-9", Method: "PUT", Path: "/orders/1", Host: "app", Headers: map[string]string{"fencing-token": "4"},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetCode() == int32(codes.OK) {
		t.Fatalf("gRPC token 4 after 5: %v, want denied", resp)
	}
	grpcServer := oneSpan(t, exp, "envoy.service.auth.v3.Authorization/Check", trace.SpanKindServer)
	if grpcServer.Parent.SpanID().String() != envoySpanID {
		t.Fatalf("gRPC server span's parent %s, want Envoy's %s; spans %v", grpcServer.Parent.SpanID(), envoySpanID, spanNames(exp))
	}
	admit = oneSpan(t, exp, "fence.admit", trace.SpanKindInternal)
	childOf(t, admit, grpcServer)
	wantAttrs(t, admit, map[string]string{"fence.decision": "stale", "fence.mark": "5"})
	var idBack string
	for _, hv := range resp.GetDeniedResponse().GetHeaders() {
		if hv.GetHeader().GetKey() == "x-request-id" {
			idBack = hv.GetHeader().GetValue()
		}
	}
	if idBack != "envoy-req-9" {
		t.Errorf("denied answer's x-request-id %q, want Envoy's request id envoy-req-9", idBack)
	}
	if refused := logLines(t, p.logs.String(), "refused"); len(refused) != 1 || refused[0]["request_id"] != "envoy-req-9" ||
		refused[0]["trace_id"] != clientTraceID {
		t.Errorf("gRPC refusal log lines %v, want request_id envoy-req-9 and trace_id %s", refused, clientTraceID)
	}
}

// A request that is not sampled (OTEL_TRACES_SAMPLER=always_off, or the
// default parent-based sampler under a client's unsampled traceparent)
// records nothing and is still answered; the upstream receives the trace
// as W3C propagation would send it: the client's trace id (or a new one),
// a parent id of fenceproxy's, the sampled flag 0, the client's tracestate.
func TestTracingNotSampled(t *testing.T) {
	unsampledParent := "00-" + clientTraceID + "-" + clientSpanID + "-00"
	tests := []struct {
		sampler, parent string
		trace           string // the trace id the upstream must receive; "" a new one
	}{
		{"always_off", "", ""},
		{"always_off", clientParent, clientTraceID},
		{"", unsampledParent, clientTraceID},
		{"parentbased_traceidratio", unsampledParent, clientTraceID},
	}
	for _, tc := range tests {
		t.Run(tc.sampler+" "+tc.parent, func(t *testing.T) {
			clearOTEL(t)
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			exp := tracetest.NewInMemoryExporter()
			up := newTraceUpstream(t)
			p := startWith(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE": "memory"}, serveHooks{spanExporter: exp})
			headers := []string{"Tracestate", "vendor=1"}
			if tc.parent != "" {
				headers = append(headers, "Traceparent", tc.parent)
			}
			if status, _ := send(t, "PUT", p.data+"/a", "1", headers...); status != 200 {
				t.Fatal(status)
			}
			if n := len(exp.GetSpans()); n != 0 {
				t.Fatalf("%d spans recorded: %v", n, spanNames(exp))
			}
			seen := up.last(t)
			tp := strings.Split(seen.Get("Traceparent"), "-")
			if len(tp) != 4 || len(tp[1]) != 32 || len(tp[2]) != 16 || tp[2] == clientSpanID || tp[3] != "00" ||
				(tc.trace != "" && tp[1] != tc.trace) || (tc.trace == "" && tp[1] == clientTraceID) {
				t.Errorf("upstream traceparent %q, want trace %q (empty: a new one), a new parent id, flags 00",
					seen.Get("Traceparent"), tc.trace)
			}
			if tc.parent != "" && seen.Get("Tracestate") != "vendor=1" {
				t.Errorf("upstream tracestate %q, want the client's", seen.Get("Tracestate"))
			}
		})
	}
}
