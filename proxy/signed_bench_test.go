package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// benchSigned runs BenchmarkServeHTTP/admitted's load (PUT /orders/<i%1000>,
// no body, the memory store, a canned upstream) with signed tokens: an
// EdDSA key (keygen's default), one token per resource, each naming its
// resource in res. The tokens repeat (an equal token is admitted), so the
// verifier's cache decides the cost: cacheSize 0 is the default cache (every
// request after the first per token is a hit), a negative one no cache (a
// signature check on every request, what a new token per request costs
// before the cache's own insert; see fencejwt's BenchmarkVerifierMiss).
// Compare with BenchmarkServeHTTP/admitted, the same load with plain
// tokens.
func benchSigned(b *testing.B, cacheSize int) {
	verifier, toks := signedTokens(b, cacheSize)
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: mustRoutes(b, ordersRoutes), Store: memstore.New(), Transport: cannedTransport{},
		Tokens: verifier})
	if err != nil {
		b.Fatal(err)
	}
	do := func(i int) {
		r := httptest.NewRequest("PUT", "/orders/"+strconv.Itoa(i%1000), nil)
		r.Header.Set("Fencing-Token", toks[i%1000])
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d, want 200: %s", w.Code, w.Body)
		}
	}
	for i := range toks { // every mark set, every token seen once (cached, when there is a cache)
		do(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		do(i)
	}
}

// BenchmarkFenceSignedCached: the holder's token was verified before; the
// request costs a cache lookup.
func BenchmarkFenceSignedCached(b *testing.B) { benchSigned(b, 0) }

// BenchmarkFenceSignedUncached: the signature is checked on every request.
func BenchmarkFenceSignedUncached(b *testing.B) { benchSigned(b, -1) }
