package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// sequenceRoutes has a route for each value of the sequence key, and the
// combinations with compare, token and a template header.
const sequenceRoutes = `
routes:
  - name: required
    path: /req/{id}
    resource: req/{id}
    sequence: required
  - name: optional
    path: /opt/{id}
    resource: opt/{id}
    sequence: optional
  - name: off
    path: /off/{id}
    resource: off/{id}
    sequence: off
  - name: token-optional
    path: /topt/{id}
    resource: topt/{id}
    token: optional
    sequence: required
  - name: tenant
    path: /tenant/{id}
    resource: "t/{header:X-Tenant}/{id}"
    sequence: required
`

// ts returns the header pairs of a request with token t and sequence s; an
// empty string leaves that header out.
func ts(t, s string) []string {
	var h []string
	if t != "" {
		h = append(h, "Fencing-Token", t)
	}
	if s != "" {
		h = append(h, "Fencing-Sequence", s)
	}
	return h
}

// requestCount reads fenceproxy_requests_total{route, decision} from the
// fixture's /metrics.
func requestCount(t *testing.T, f *fixture, route, decision string) int {
	t.Helper()
	_, body := get(t, NewAdmin(AdminOptions{Store: f.store, Metrics: f.metrics}), "/metrics")
	prefix := `fenceproxy_requests_total{decision="` + decision + `",route="` + route + `"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("metric line %q", line)
			}
			return n
		}
	}
	t.Fatalf("no series %s", prefix)
	return 0
}

// The documented sequence cases one by one, each against a fresh store:
// the answer, its members (all decimal strings), the decision counted, and
// that the upstream receives nothing for a refusal and both headers intact
// for an admission.
func TestSequenceAnswers(t *testing.T) {
	type step struct {
		target  string
		headers []string
	}
	tests := []struct {
		name     string
		setup    []step // each must be admitted (200)
		target   string
		headers  []string
		status   int
		typ      string            // "" = forwarded
		members  map[string]string // problem members that must be present with these values
		absent   []string          // problem members that must be left out
		route    string
		decision string // counted for the request under test
	}{
		// sequence: required
		{name: "required: first request admitted", target: "/req/1", headers: ts("42", "7"),
			status: 200, route: "required", decision: "admitted"},
		{name: "required: (42,7) then (42,7) is a stale sequence", setup: []step{{"/req/1", ts("42", "7")}},
			target: "/req/1", headers: ts("42", "7"), status: 409, typ: TypeStaleSequence,
			members: map[string]string{"sequence": "7", "highWaterSequence": "7", "token": "42", "highWaterMark": "42", "resource": "req/1", "route": "required"},
			route:   "required", decision: "stale"},
		{name: "required: (42,8) then (42,7) is a stale sequence", setup: []step{{"/req/1", ts("42", "8")}},
			target: "/req/1", headers: ts("42", "7"), status: 409, typ: TypeStaleSequence,
			members: map[string]string{"sequence": "7", "highWaterSequence": "8", "token": "42", "highWaterMark": "42"},
			route:   "required", decision: "stale"},
		{name: "required: (42,7) then (42,8) admitted", setup: []step{{"/req/1", ts("42", "7")}},
			target: "/req/1", headers: ts("42", "8"), status: 200, route: "required", decision: "admitted"},
		{name: "required: (42,7) then (41,9) is a stale token", setup: []step{{"/req/1", ts("42", "7")}},
			target: "/req/1", headers: ts("41", "9"), status: 409, typ: TypeStaleToken,
			members: map[string]string{"token": "41", "highWaterMark": "42", "sequence": "9", "highWaterSequence": "7", "resource": "req/1"},
			route:   "required", decision: "stale"},
		{name: "required: a newer token starts its sequence anew", setup: []step{{"/req/1", ts("42", "7")}},
			target: "/req/1", headers: ts("43", "0"), status: 200, route: "required", decision: "admitted"},
		{name: "required: (42,7) then (42,8) on another resource is its own mark", setup: []step{{"/req/1", ts("42", "8")}},
			target: "/req/2", headers: ts("42", "7"), status: 200, route: "required", decision: "admitted"},
		{name: "required: extremes are exact", setup: []step{{"/req/1", ts("18446744073709551615", "18446744073709551614")}},
			target: "/req/1", headers: ts("18446744073709551615", "18446744073709551615"), status: 200, route: "required", decision: "admitted"},
		{name: "required: sequence absent is 428", target: "/req/1", headers: ts("42", ""), status: 428, typ: TypeSequenceRequired,
			members: map[string]string{"token": "42", "route": "required"}, absent: []string{"sequence", "highWaterMark"},
			route: "required", decision: "missing"},
		{name: "required: token absent is 428 token-required", target: "/req/1", headers: ts("", "7"), status: 428, typ: TypeTokenRequired,
			route: "required", decision: "missing"},
		{name: "required: a malformed token is answered before the sequence", target: "/req/1", headers: ts("042", "x"),
			status: 400, typ: TypeTokenMalformed, route: "required", decision: "malformed"},

		// sequence: optional, compare ">=" (the default)
		{name: "optional: with a sequence, by the pair", setup: []step{{"/opt/1", ts("42", "7")}},
			target: "/opt/1", headers: ts("42", "7"), status: 409, typ: TypeStaleSequence,
			members: map[string]string{"sequence": "7", "highWaterSequence": "7", "token": "42", "highWaterMark": "42"},
			route:   "optional", decision: "stale"},
		{name: "optional >=: without a sequence, an equal token is admitted", setup: []step{{"/opt/1", ts("42", "7")}},
			target: "/opt/1", headers: ts("42", ""), status: 200, route: "optional", decision: "admitted"},
		{name: "optional >=: without a sequence, the mark keeps its sequence",
			setup:  []step{{"/opt/1", ts("42", "7")}, {"/opt/1", ts("42", "")}},
			target: "/opt/1", headers: ts("42", "7"), status: 409, typ: TypeStaleSequence,
			members: map[string]string{"sequence": "7", "highWaterSequence": "7"}, route: "optional", decision: "stale"},
		{name: "optional >=: without a sequence, an older token is stale", setup: []step{{"/opt/1", ts("42", "7")}},
			target: "/opt/1", headers: ts("41", ""), status: 409, typ: TypeStaleToken,
			members: map[string]string{"token": "41", "highWaterMark": "42", "highWaterSequence": "7"}, absent: []string{"sequence"},
			route: "optional", decision: "stale"},

		// sequence: off
		{name: "off: the sequence is not read", setup: []step{{"/off/1", ts("42", "7")}},
			target: "/off/1", headers: ts("42", "7"), status: 200, route: "off", decision: "admitted"},
		{name: "off: a malformed sequence is not read", target: "/off/1", headers: ts("42", "07"),
			status: 200, route: "off", decision: "admitted"},

		// token: optional with sequence: required
		{name: "token optional: no token is forwarded unfenced", target: "/topt/1", headers: ts("", ""),
			status: 200, route: "token-optional", decision: "unfenced"},
		{name: "token optional: a token without a sequence is 428", target: "/topt/1", headers: ts("42", ""),
			status: 428, typ: TypeSequenceRequired, route: "token-optional", decision: "missing"},

		// Connection naming a header the admission depends on
		{name: "Connection names the sequence header", target: "/req/1",
			headers: append(ts("42", "7"), "Connection", "Fencing-Sequence"),
			status:  400, typ: TypeSequenceMalformed, route: "required", decision: "malformed"},
		{name: "Connection names the sequence header among others", target: "/req/1",
			headers: append(ts("42", "7"), "Connection", "keep-alive, fencing-sequence"),
			status:  400, typ: TypeSequenceMalformed, route: "required", decision: "malformed"},
		{name: "Connection names the sequence header on optional without one", target: "/opt/1",
			headers: append(ts("42", ""), "Connection", "fencing-sequence"),
			status:  400, typ: TypeSequenceMalformed, route: "optional", decision: "malformed"},
		{name: "Connection names the token header on a sequence route", target: "/req/1",
			headers: append(ts("42", "7"), "Connection", "fencing-token"),
			status:  400, typ: TypeTokenMalformed, route: "required", decision: "malformed"},
		{name: "Connection names a template header on a sequence route", target: "/tenant/1",
			headers: append(ts("42", "7"), "X-Tenant", "acme", "Connection", "x-tenant"),
			status:  400, typ: TypeBadRequest, route: "tenant", decision: "bad_request"},
		{name: "Connection names the sequence header on an off route", target: "/off/1",
			headers: append(ts("42", "7"), "Connection", "fencing-sequence"),
			status:  200, route: "off", decision: "admitted"},
		{name: "template filled on a sequence route", target: "/tenant/1",
			headers: append(ts("42", "7"), "X-Tenant", "acme"), status: 200, route: "tenant", decision: "admitted"},
		{name: "template unfilled on a sequence route names the sequence", target: "/tenant/1",
			headers: ts("42", "7"), status: 400, typ: TypeBadRequest,
			members: map[string]string{"token": "42", "sequence": "7"}, route: "tenant", decision: "bad_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, sequenceRoutes, nil)
			for _, s := range tc.setup {
				if resp, body := f.do("PUT", s.target, s.headers...); resp.StatusCode != 200 {
					t.Fatalf("setup %v: %d %s", s, resp.StatusCode, body)
				}
			}
			before := len(f.up.received())
			counted := requestCount(t, f, tc.route, tc.decision)
			resp, body := f.do("PUT", tc.target, tc.headers...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			if n := requestCount(t, f, tc.route, tc.decision) - counted; n != 1 {
				t.Errorf("decision %s of route %s counted %d times, want once", tc.decision, tc.route, n)
			}
			got := f.up.received()[before:]
			if tc.typ == "" {
				if len(got) != 1 || body != "upstream ok" {
					t.Fatalf("forwarded %d requests, body %q; want the upstream's answer", len(got), body)
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("a refused request reached the upstream: %+v", got)
			}
			p := decodeProblem(t, resp, body)
			if p.Type != tc.typ {
				t.Fatalf("type %q, want %q (%s)", p.Type, tc.typ, body)
			}
			var members map[string]any
			if err := json.Unmarshal([]byte(body), &members); err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.members {
				if v, ok := members[k].(string); !ok || v != want {
					t.Errorf("member %s = %#v, want the string %q (%s)", k, members[k], want, body)
				}
			}
			for _, k := range tc.absent {
				if v, ok := members[k]; ok {
					t.Errorf("member %s = %#v, want it left out (%s)", k, v, body)
				}
			}
			for k, v := range members {
				if _, ok := v.(string); !ok && k != "status" {
					t.Errorf("member %s is %T, want a string", k, v)
				}
			}
		})
	}
}

// Every malformed spelling of the sequence, on a required and an optional
// route, is 400 sequence-malformed naming the header and the rule; nothing
// is forwarded and no mark is written (an optional route does not take a
// malformed sequence for an absent one).
func TestMalformedSequenceHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers []string // after the token
		reason  string
	}{
		{"leading zero", []string{"Fencing-Sequence", "07"}, "leading zero"},
		{"plus sign", []string{"Fencing-Sequence", "+7"}, "not a decimal number"},
		{"negative", []string{"Fencing-Sequence", "-7"}, "not a decimal number"},
		{"decimal point", []string{"Fencing-Sequence", "7.0"}, "not a decimal number"},
		{"hex", []string{"Fencing-Sequence", "0x7"}, "not a decimal number"},
		{"inner space", []string{"Fencing-Sequence", "7 8"}, "not a decimal number"},
		{"comma list", []string{"Fencing-Sequence", "7, 8"}, "comma-separated list"},
		{"trailing comma", []string{"Fencing-Sequence", "7,"}, "comma-separated list"},
		{"two header lines", []string{"Fencing-Sequence", "7", "Fencing-Sequence", "8"}, "repeated header"},
		{"two equal header lines", []string{"Fencing-Sequence", "7", "Fencing-Sequence", "7"}, "repeated header"},
		{"empty", []string{"Fencing-Sequence", ""}, "empty"},
		{"21 digits", []string{"Fencing-Sequence", "100000000000000000000"}, "too long"},
		{"2^64", []string{"Fencing-Sequence", "18446744073709551616"}, "out of range"},
	}
	for _, target := range []string{"/req/1", "/opt/1"} {
		for _, tc := range tests {
			t.Run(target+" "+tc.name, func(t *testing.T) {
				f := newFixture(t, sequenceRoutes, nil)
				resp, body := f.do("PUT", target, append([]string{"Fencing-Token", "42"}, tc.headers...)...)
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status %d, want 400 (%s)", resp.StatusCode, body)
				}
				p := decodeProblem(t, resp, body)
				if p.Type != TypeSequenceMalformed || p.Token != "42" {
					t.Fatalf("problem %+v", p)
				}
				if want := "Fencing-Sequence: malformed sequence: " + tc.reason; p.Detail != want {
					t.Errorf("detail %q, want %q", p.Detail, want)
				}
				if n := len(f.up.received()); n != 0 {
					t.Fatalf("upstream received %d requests", n)
				}
				resource := strings.TrimPrefix(target, "/")
				if _, ok, err := f.store.Mark(context.Background(), resource); ok || err != nil {
					t.Fatalf("a mark was written for %s (%v)", resource, err)
				}
			})
		}
	}
}

// An admitted request reaches the upstream with its token and sequence
// headers intact: each exactly once, as sent (whitespace around a value is
// trimmed by HTTP itself). On an optional route a request without a
// sequence is forwarded without one; none is made up.
func TestSequenceForwardedIntact(t *testing.T) {
	f := newFixture(t, sequenceRoutes, nil)
	for _, tc := range []struct {
		target    string
		headers   []string
		sequences []string
	}{
		{"/req/1", ts("42", "7"), []string{"7"}},
		{"/req/1", ts("42", " 8\t"), []string{"8"}},
		{"/req/1", ts("42", "18446744073709551615"), []string{"18446744073709551615"}},
		{"/opt/1", ts("42", "1"), []string{"1"}},
		{"/opt/1", ts("42", ""), nil},
		{"/off/1", ts("42", "07"), []string{"07"}},
	} {
		before := len(f.up.received())
		if resp, body := f.do("PUT", tc.target, tc.headers...); resp.StatusCode != 200 {
			t.Fatalf("%s %q: %d %s", tc.target, tc.headers, resp.StatusCode, body)
		}
		got := f.up.received()[before:]
		if len(got) != 1 || len(got[0].Tokens) != 1 || got[0].Tokens[0] != "42" ||
			strings.Join(got[0].Sequences, "|") != strings.Join(tc.sequences, "|") {
			t.Fatalf("%s %q: upstream got %+v, want token [42] and sequence %q", tc.target, tc.headers, got, tc.sequences)
		}
	}
}

// A custom sequence header (Options.SequenceHeader) is the one read; the
// default name then means nothing on that proxy.
func TestSequenceHeaderOption(t *testing.T) {
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	p, err := New(Options{Upstream: u, Routes: mustRoutes(t, sequenceRoutes), Store: memstore.New(),
		TokenHeader: "X-Lease", SequenceHeader: "x-lease-seq"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(headers ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("PUT", "/req/1", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Add(headers[i], headers[i+1])
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		return w
	}
	if w := send("X-Lease", "42", "Fencing-Sequence", "7"); w.Code != 428 || !strings.Contains(w.Body.String(), "X-Lease-Seq header") {
		t.Fatalf("default name on a custom proxy: %d %s", w.Code, w.Body)
	}
	if w := send("X-Lease", "42", "X-Lease-Seq", "7"); w.Code != 200 {
		t.Fatalf("custom name: %d %s", w.Code, w.Body)
	}
	if w := send("X-Lease", "42", "X-Lease-Seq", "7"); w.Code != 409 || !strings.Contains(w.Body.String(), TypeStaleSequence) {
		t.Fatalf("custom name, repeated: %d %s", w.Code, w.Body)
	}

	if _, err := New(Options{Upstream: u, Routes: mustRoutes(t, sequenceRoutes), Store: memstore.New(),
		TokenHeader: "x-lease", SequenceHeader: "X-Lease"}); err == nil {
		t.Fatal("New accepted one header for the token and the sequence")
	}
}

// Refusal lines carry the request's sequence and the mark's as strings
// (JSON numbers lose precision past 2^53), as token and mark; the admission's
// debug line too.
func TestSequenceLogFields(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: mustRoutes(t, sequenceRoutes), Store: memstore.New(),
		Transport: cannedTransport{}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	send := func(target, token, seq string) {
		r := httptest.NewRequest("PUT", target, nil)
		r.Header.Set("Fencing-Token", token)
		if seq != "" {
			r.Header.Set("Fencing-Sequence", seq)
		}
		p.ServeHTTP(httptest.NewRecorder(), r)
	}
	send("/req/1", "42", "18446744073709551615") // admitted
	send("/req/1", "42", "9")                    // stale sequence
	send("/req/1", "41", "9")                    // stale token
	send("/req/1", "42", "")                     // sequence required
	send("/opt/1", "42", "")                     // admitted without a sequence

	admitted := logs.FilterMessage("admitted").All()
	if len(admitted) != 2 {
		t.Fatalf("%d admitted lines", len(admitted))
	}
	if f := admitted[0].ContextMap(); f["sequence"] != "18446744073709551615" || f["highWaterSequence"] != "18446744073709551615" {
		t.Errorf("admitted line %v", f)
	}
	if f := admitted[1].ContextMap(); f["sequence"] != nil || f["highWaterSequence"] != nil {
		t.Errorf("admitted without a sequence, the line has one: %v", f)
	}

	refused := logs.FilterMessage("refused").All()
	if len(refused) != 3 {
		t.Fatalf("%d refused lines", len(refused))
	}
	for i, want := range []map[string]any{
		{"decision": "stale", "status": int64(409), "token": "42", "mark": "42", "sequence": "9", "highWaterSequence": "18446744073709551615"},
		{"decision": "stale", "status": int64(409), "token": "41", "mark": "42", "sequence": "9", "highWaterSequence": "18446744073709551615"},
		{"decision": "missing", "status": int64(428), "token": "42", "sequence": nil, "highWaterSequence": nil},
	} {
		got := refused[i].ContextMap()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("refusal %d: %s = %#v, want %#v (line %v)", i, k, got[k], v, got)
			}
		}
	}
}
