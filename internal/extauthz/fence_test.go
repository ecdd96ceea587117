package extauthz

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fenceHandler stands in for the authorization-mode handler of package
// proxy, over a fixed table: the route PUT /orders/{id} is fenced with a
// mark of 5, /dry/* is a dry-run route, everything else is unfenced. It
// reads the original request as the HTTP form does (X-Original-Method and
// X-Original-URI first) and records what reached it, keyed by
// X-Request-Id.
type fenceHandler struct {
	mu   sync.Mutex
	seen map[string]seenRequest
}

// seenRequest is what one request looked like inside the handler.
type seenRequest struct {
	method, uri       string // as the handler resolves the original request
	rMethod, rURI     string // r.Method and r.URL.RequestURI()
	path, rawQuery    string
	scheme, urlHost   string
	host, proto       string
	remoteAddr        string
	header            http.Header
	deadline          time.Time
	hasDeadline, body bool
}

func newFenceHandler() *fenceHandler { return &fenceHandler{seen: map[string]seenRequest{}} }

func (f *fenceHandler) lookup(id string) (seenRequest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.seen[id]
	return s, ok
}

func (f *fenceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := r.Method
	if v := r.Header.Get("X-Original-Method"); v != "" {
		method = v
	} else if v := r.Header.Get("X-Forwarded-Method"); v != "" {
		method = v
	}
	uri := r.URL.RequestURI()
	if v := r.Header.Get("X-Original-Uri"); v != "" {
		uri = v
	} else if v := r.Header.Get("X-Forwarded-Uri"); v != "" {
		uri = v
	}
	dl, hasDL := r.Context().Deadline()
	n, _ := r.Body.Read(make([]byte, 1))
	f.mu.Lock()
	f.seen[r.Header.Get("X-Request-Id")] = seenRequest{
		method: method, uri: uri,
		rMethod: r.Method, rURI: r.URL.RequestURI(),
		path: r.URL.Path, rawQuery: r.URL.RawQuery,
		scheme: r.URL.Scheme, urlHost: r.URL.Host,
		host: r.Host, proto: r.Proto, remoteAddr: r.RemoteAddr,
		header: r.Header.Clone(), deadline: dl, hasDeadline: hasDL, body: n > 0,
	}
	f.mu.Unlock()

	path, _, _ := strings.Cut(uri, "?")
	switch {
	case path == "/panic":
		w.Header().Set("Fence-Decision", "admitted")
		w.WriteHeader(http.StatusOK) // written, then the handler fails: still denied
		panic("handler bug")
	case path == "/abort":
		panic(http.ErrAbortHandler)
	case path == "/silent":
		return // writes nothing: net/http answers 200
	case path == "/late-header":
		w.Header().Set("Fence-Decision", "stale")
		w.WriteHeader(http.StatusConflict)
		w.Header().Set("X-Too-Late", "1") // after WriteHeader: not part of the answer
		_, _ = w.Write([]byte(`{}`))
		return
	case path == "/odd-status":
		w.Header().Set("Fence-Decision", "odd")
		w.WriteHeader(499)
		return
	case path == "/big":
		w.Header().Set("Fence-Decision", "stale")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(strings.Repeat("x", maxBody+100)))
		return
	}
	if method != http.MethodPut || !(strings.HasPrefix(path, "/orders/") || strings.HasPrefix(path, "/dry/")) {
		w.Header().Set("Fence-Decision", "unfenced")
		w.WriteHeader(http.StatusOK)
		return
	}
	dry := strings.HasPrefix(path, "/dry/")
	refuse := func(decision string, p testProblem, extra ...string) {
		if dry {
			w.Header().Set("Fence-Decision", "would_"+decision)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Fence-Decision", decision)
		for i := 0; i+1 < len(extra); i += 2 {
			w.Header().Add(extra[i], extra[i+1])
		}
		writeTestProblem(w, p)
	}
	tokens := r.Header.Values("Fencing-Token")
	switch {
	case len(tokens) == 0:
		refuse("missing", testProblem{Type: "urn:fenceproxy:token-required", Title: "Fencing token required", Status: 428})
	case len(tokens) > 1 || strings.Contains(tokens[0], ","):
		refuse("malformed", testProblem{Type: "urn:fenceproxy:token-malformed", Title: "Malformed fencing token", Status: 400})
	case tokens[0] == "5", tokens[0] == "6":
		w.Header().Set("Fence-Decision", "admitted")
		w.WriteHeader(http.StatusOK)
	case tokens[0] == "3":
		refuse("stale", testProblem{Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409,
			Resource: "orders/1", Token: "3", HighWaterMark: "5"})
	case tokens[0] == "7":
		refuse("unavailable", testProblem{Type: "urn:fenceproxy:store-unavailable", Title: "Store unavailable", Status: 503},
			"Retry-After", "1")
	case tokens[0] == "jws":
		refuse("invalid", testProblem{Type: "urn:fenceproxy:token-invalid", Title: "Invalid fencing token", Status: 401},
			"WWW-Authenticate", `Bearer error="invalid_token"`, "WWW-Authenticate", `Fence realm="orders"`)
	default:
		refuse("malformed", testProblem{Type: "urn:fenceproxy:token-malformed", Title: "Malformed fencing token", Status: 400})
	}
}

type testProblem struct {
	Type          string `json:"type"`
	Title         string `json:"title"`
	Status        int    `json:"status"`
	Detail        string `json:"detail"`
	Resource      string `json:"resource,omitempty"`
	Token         string `json:"token,omitempty"`
	HighWaterMark string `json:"highWaterMark,omitempty"`
}

func problemBody(p testProblem) string {
	b, _ := json.Marshal(p)
	return string(b) + "\n"
}

func writeTestProblem(w http.ResponseWriter, p testProblem) {
	body := problemBody(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(body))) // must not reach Envoy: it counts the body itself
	w.WriteHeader(p.Status)
	_, _ = w.Write([]byte(body))
}
