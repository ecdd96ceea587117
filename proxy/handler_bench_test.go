package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

func BenchmarkRouteMatch(b *testing.B) {
	rt, err := newRouter(mustRoutes(b, ordersRoutes), "Fencing-Token", "Fencing-Sequence", NewMetrics())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, rctx := rt.match("PUT", "/orders/42")
		rt.release(rctx)
	}
}

// cannedTransport answers every request itself, so the benchmark measures
// the proxy's own work (fence and forward) without a network hop. Like
// fenceproxy's transport it takes informational answers without a trace,
// so the common request takes the direct path, as it does when shipped.
type cannedTransport struct{}

func (c cannedTransport) RoundTripInformational(r *http.Request, _ upstream.Informational) (*http.Response, error) {
	return c.RoundTrip(r)
}

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil { // as a transport does: send the body, then close it
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r,
	}, nil
}

// BenchmarkServeHTTP is one request through the whole handler with the
// memory store: admitted (forwarded to a canned upstream) and stale
// (refused with a problem). Compare the allocations with BenchmarkRouteMatch
// and BenchmarkParseToken: the forwarding (httputil.ReverseProxy) is most of
// them.
func BenchmarkServeHTTP(b *testing.B) {
	up, _ := url.Parse("http://127.0.0.1:1")
	run := func(b *testing.B, token func(i int) string, want int, body string, noDrain ...bool) {
		// A proxy and store of its own per run: with -count, tokens start
		// again from the same numbers.
		p, err := New(Options{Upstream: up, Routes: mustRoutes(b, ordersRoutes), Store: memstore.New(), Transport: cannedTransport{},
			NoDrain: len(noDrain) > 0 && noDrain[0]})
		if err != nil {
			b.Fatal(err)
		}
		if want == http.StatusConflict {
			for i := range 1000 {
				r := httptest.NewRequest("PUT", "/orders/"+strconv.Itoa(i), nil)
				r.Header.Set("Fencing-Token", "1000000")
				p.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			var rb io.Reader
			if body != "" {
				rb = strings.NewReader(body)
			}
			r := httptest.NewRequest("PUT", "/orders/"+strconv.Itoa(i%1000), rb)
			r.Header.Set("Fencing-Token", token(i))
			w := httptest.NewRecorder()
			p.ServeHTTP(w, r)
			if w.Code != want {
				b.Fatalf("status %d, want %d: %s", w.Code, want, w.Body)
			}
		}
	}
	b.Run("admitted", func(b *testing.B) {
		run(b, func(i int) string { return strconv.Itoa(1_000_000 + i) }, 200, "")
	})
	// The same without the drain barrier (FENCE_DRAIN=off): the difference
	// is what the barrier costs the proxy (the memory store's in-process
	// barrier; with Redis the store's share is in the load benchmark).
	b.Run("admitted-nodrain", func(b *testing.B) {
		run(b, func(i int) string { return strconv.Itoa(1_000_000 + i) }, 200, "", true)
	})
	// The 20-byte body of the load benchmark: read whole before admission
	// (readBodyFirst), then written by the transport.
	b.Run("admitted-body", func(b *testing.B) {
		run(b, func(i int) string { return strconv.Itoa(1_000_000 + i) }, 200, "0123456789abcdefghi\n")
	})
	// Stale: every resource first gets a high mark (before the timed
	// loop), then each request's token is below it.
	b.Run("stale", func(b *testing.B) {
		run(b, func(int) string { return "1" }, 409, "")
	})
}
