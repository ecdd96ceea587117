package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

var generatedID = regexp.MustCompile(`^[0-9a-f]{16}$`)

// idTransport answers every request itself and records the X-Request-Id
// values it was sent.
type idTransport struct{ sent *[]string }

func (t idTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	*t.sent = append(*t.sent, strings.Join(r.Header.Values(HeaderRequestID), "|"))
	return cannedTransport{}.RoundTrip(r)
}

// A request's id: the client's when it is one value of printable ASCII of
// at most 128 bytes, else a new one of 16 hex digits. The upstream gets it,
// the client gets it back, forwarded or refused.
func TestRequestIDTakenOrReplaced(t *testing.T) {
	long := strings.Repeat("a", maxRequestID)
	tests := []struct {
		name string
		ids  []string // the X-Request-Id lines sent
		keep bool     // the client's id is the request's
	}{
		{name: "none", ids: nil},
		{name: "a UUID", ids: []string{"7f1c7c1e-3b3a-4f53-9b53-1b7a8d0e6a21"}, keep: true},
		{name: "128 bytes", ids: []string{long}, keep: true},
		{name: "129 bytes", ids: []string{long + "a"}},
		{name: "empty", ids: []string{""}},
		{name: "control character", ids: []string{"abc\x01def"}},
		{name: "forged log line", ids: []string{"abc\n{\"level\":\"info\"}"}},
		{name: "space", ids: []string{"abc def"}},
		{name: "not ASCII", ids: []string{"caf\xc3\xa9"}},
		{name: "two values", ids: []string{"one", "two"}},
	}
	for _, tt := range tests {
		for _, path := range []string{"/orders/1", "/reports/x"} { // fenced and admitted; unfenced
			t.Run(tt.name+" "+path, func(t *testing.T) {
				var sent []string
				up, _ := url.Parse("http://127.0.0.1:1")
				p, err := New(Options{Upstream: up, Routes: mustRoutes(t, ordersRoutes), Store: memstore.New(), Transport: idTransport{&sent}})
				if err != nil {
					t.Fatal(err)
				}
				r := httptest.NewRequest("PUT", path, nil)
				r.Header.Set("Fencing-Token", "5")
				r.Header[HeaderRequestID] = tt.ids
				w := httptest.NewRecorder()
				p.ServeHTTP(w, r)
				if w.Code != 200 || len(sent) != 1 {
					t.Fatalf("status %d, %d requests upstream", w.Code, len(sent))
				}
				back := w.Header().Values(HeaderRequestID)
				if len(back) != 1 || back[0] != sent[0] {
					t.Fatalf("the upstream got X-Request-Id %q, the client %q", sent[0], back)
				}
				switch {
				case tt.keep && sent[0] != tt.ids[0]:
					t.Fatalf("the client's id %q was replaced by %q", tt.ids[0], sent[0])
				case !tt.keep && !generatedID.MatchString(sent[0]):
					t.Fatalf("id %q sent upstream for X-Request-Id %q, want a new 16-hex-digit id", sent[0], tt.ids)
				}
			})
		}
	}
}

// The upstream's own X-Request-Id does not replace the request's on the
// answer (nor sit beside it).
func TestRequestIDReplacesTheUpstreams(t *testing.T) {
	f := newFixture(t, ordersRoutes, memstore.New())
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderRequestID, "upstream-made")
		_, _ = io.WriteString(w, "ok")
	})
	resp, _ := f.do("PUT", "/orders/1", "Fencing-Token", "1", HeaderRequestID, "client-made")
	if got := resp.Header.Values(HeaderRequestID); len(got) != 1 || got[0] != "client-made" {
		t.Fatalf("X-Request-Id %q, want the request's client-made only", got)
	}
}

// observedFixture is a fixture whose proxy logs to an observer at level.
func observedFixture(t *testing.T, routes string, level zapcore.Level, opts func(*Options)) (*fixture, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(level)
	return newFixtureWith(t, routes, memstore.New(), func(o *Options) {
		o.Logger = zap.New(core)
		if opts != nil {
			opts(o)
		}
	}), logs
}

// requestIDs returns the request_id of every line with message msg.
func requestIDs(logs *observer.ObservedLogs, msg string) []string {
	var ids []string
	for _, e := range logs.FilterMessage(msg).All() {
		id, _ := e.ContextMap()["request_id"].(string)
		ids = append(ids, id)
	}
	return ids
}

// Every log line a request writes carries its id: the refusal, the
// admission's debug line, the upstream's failure, the barrier's refusal.
func TestRequestIDOnEveryLogLine(t *testing.T) {
	t.Run("refusal and admission", func(t *testing.T) {
		f, logs := observedFixture(t, ordersRoutes, zapcore.DebugLevel, nil)
		resp, _ := f.do("PUT", "/orders/1", "Fencing-Token", "5", HeaderRequestID, "adm-1")
		if resp.StatusCode != 200 || resp.Header.Get(HeaderRequestID) != "adm-1" {
			t.Fatalf("5: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get(HeaderRequestID))
		}
		resp, _ = f.do("PUT", "/orders/1", "Fencing-Token", "4", HeaderRequestID, "stale-1")
		if resp.StatusCode != 409 || resp.Header.Get(HeaderRequestID) != "stale-1" {
			t.Fatalf("4: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get(HeaderRequestID))
		}
		resp, _ = f.do("PUT", "/orders/1") // no token: 428, a generated id
		id := resp.Header.Get(HeaderRequestID)
		if resp.StatusCode != 428 || !generatedID.MatchString(id) {
			t.Fatalf("no token: %d, X-Request-Id %q", resp.StatusCode, id)
		}
		if got := requestIDs(logs, "admitted"); len(got) != 1 || got[0] != "adm-1" {
			t.Errorf("admitted lines' request_id %q, want [adm-1]", got)
		}
		if got := requestIDs(logs, "refused"); len(got) != 2 || got[0] != "stale-1" || got[1] != id {
			t.Errorf("refused lines' request_id %q, want [stale-1 %s]", got, id)
		}
		if n := logs.FilterFieldKey("trace_id").Len(); n != 0 {
			t.Errorf("%d lines with a trace_id, tracing off", n)
		}
	})
	t.Run("upstream failure", func(t *testing.T) {
		f, logs := observedFixture(t, ordersRoutes, zapcore.InfoLevel, nil)
		f.up.Close() // nothing listens: 502
		resp, _ := f.do("PUT", "/orders/1", "Fencing-Token", "5", HeaderRequestID, "down-1")
		if resp.StatusCode != 502 || resp.Header.Get(HeaderRequestID) != "down-1" {
			t.Fatalf("%d, X-Request-Id %q", resp.StatusCode, resp.Header.Get(HeaderRequestID))
		}
		if got := requestIDs(logs, "upstream failed"); len(got) != 1 || got[0] != "down-1" {
			t.Errorf("upstream failed lines' request_id %q, want [down-1]", got)
		}
	})
	t.Run("drain refusal", func(t *testing.T) {
		f, logs := observedFixture(t, drainRoutes, zapcore.InfoLevel, func(o *Options) { o.DrainTimeout = 50 * time.Millisecond })
		h := holdingUpstream(f)
		held := f.send("/docs/1", "41", true)
		h.arrives(t, "41", 5*time.Second)
		resp, _ := f.do("PUT", "/docs/1", "Fencing-Token", "42", HeaderRequestID, "wait-42")
		if resp.StatusCode != 503 || resp.Header.Get(HeaderRequestID) != "wait-42" {
			t.Fatalf("42 behind 41: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get(HeaderRequestID))
		}
		close(h.release)
		answer(t, held, 200)
		if got := requestIDs(logs, "refused"); len(got) != 1 || got[0] != "wait-42" {
			t.Errorf("drain refusal lines' request_id %q, want [wait-42]", got)
		}
	})
}

// In the authorization mode, the question's X-Request-Id (nginx's
// $request_id) names the log lines and comes back on every answer.
func TestRequestIDAuthz(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	a, err := NewAuthz(Options{Routes: mustRoutes(t, ordersRoutes), Store: memstore.New(), Logger: zap.New(core)}, "")
	if err != nil {
		t.Fatal(err)
	}
	ask := func(token, id string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/auth", nil)
		r.Header.Set("X-Original-Method", "PUT")
		r.Header.Set("X-Original-Uri", "/orders/1")
		r.Header.Set("Fencing-Token", token)
		if id != "" {
			r.Header.Set(HeaderRequestID, id)
		}
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r)
		return w
	}
	if w := ask("5", "nginx-1"); w.Code != 200 || w.Header().Get(HeaderRequestID) != "nginx-1" {
		t.Fatalf("admitted: %d, X-Request-Id %q", w.Code, w.Header().Get(HeaderRequestID))
	}
	if w := ask("4", "nginx-2"); w.Code != 409 || w.Header().Get(HeaderRequestID) != "nginx-2" {
		t.Fatalf("stale: %d, X-Request-Id %q", w.Code, w.Header().Get(HeaderRequestID))
	}
	w := ask("3", "")
	if id := w.Header().Get(HeaderRequestID); !generatedID.MatchString(id) {
		t.Fatalf("no X-Request-Id asked: answered %q, want a new id", id)
	}
	if got := requestIDs(logs, "refused"); len(got) != 2 || got[0] != "nginx-2" || got[1] != w.Header().Get(HeaderRequestID) {
		t.Errorf("refused lines' request_id %q", got)
	}
}

// What a request id costs a forward, against the same ReverseProxy
// without ids: with the client's id, the answer's header line; with a new
// one, the id and its header lines besides. The fence itself adds none
// (TestFenceAllocations counts the id as the forward's).
func TestRequestIDAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("counts allocations; run without -race")
	}
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: config.DefaultRoutes(), Store: memstore.New(), Transport: cannedTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	withIDs := p.table.Load().fallback.forward
	withoutIDs := &forwarder{rp: &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:  cannedTransport{},
		BufferPool: copyBuffers,
	}, info: cannedTransport{}, log: zap.NewNop()}
	allocs := func(h http.Handler, ids []string) float64 {
		return testing.AllocsPerRun(1000, func() {
			r := httptest.NewRequest("GET", "/x", nil)
			r.Header[HeaderRequestID] = ids
			h.ServeHTTP(httptest.NewRecorder(), r)
		})
	}
	clientID := []string{"client-id"}
	kept := allocs(withIDs, clientID) - allocs(withoutIDs, clientID)
	made := allocs(withIDs, nil) - allocs(withoutIDs, nil)
	t.Logf("a request id costs the forward %.0f allocations when the client sent one, %.0f when it is made", kept, made)
	// With the client's id: its line in the response's header map (the
	// canned response's map being empty; the answer shares the line) and
	// the recorder's copy of one more header (a server writes the header
	// instead). A new id adds the string and its line.
	if kept > 3 || made > kept+2 {
		t.Fatalf("a request id costs %.0f allocations (the client's) and %.0f (a new one), want at most 3 and 5", kept, made)
	}
}
