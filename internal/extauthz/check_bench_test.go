package extauthz

import (
	"context"
	"net/http"
	"testing"
)

// benchRequest is a typical Envoy CheckRequest: a fenced write with the
// headers a sidecar Envoy adds.
func benchRequest() envoyRequest {
	return envoyRequest{id: "7f1c7c1e-3b3a-4f53-9b53-1b7a8d0e6a21", method: "PUT", path: "/orders/42?dryRun=false", headers: map[string]string{
		"fencing-token":         "1842",
		"content-type":          "application/json",
		"content-length":        "128",
		"accept":                "*/*",
		"x-envoy-attempt-count": "1",
		"x-b3-traceid":          "80f198ee56343ba864fe8b2a57d3eff7",
	}}
}

// BenchmarkCheck is the adapter alone, in process: build the request, run a
// handler that answers 200 with its decision, map the answer.
func BenchmarkCheck(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(decisionHeader, "admitted")
		w.WriteHeader(http.StatusOK)
	})
	benchCheck(b, h)
}

// BenchmarkCheckDenied is the same with a 409 problem answer, the path
// that copies headers and body into a DeniedHttpResponse.
func BenchmarkCheckDenied(b *testing.B) {
	body := []byte(problemBody(testProblem{Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409,
		Resource: "orders/42", Token: "1842", HighWaterMark: "1843"}))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(decisionHeader, "stale")
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write(body)
	})
	benchCheck(b, h)
}

func benchCheck(b *testing.B, h http.Handler) {
	s := New(h, nil)
	req := benchRequest().build()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := s.Check(ctx, req)
		if err != nil || resp.GetStatus() == nil {
			b.Fatal(resp, err)
		}
	}
}
