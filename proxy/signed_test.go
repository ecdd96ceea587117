package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// signedFixture is a proxy with FENCE_TOKEN_KEYS_FILE's verifier, and the
// signer of its one key.
func signedFixture(t *testing.T) (*fixture, *fencejwt.Signer, *memstore.Store) {
	t.Helper()
	priv, set, err := fencejwt.NewKey(fencejwt.KindEdDSA, "k1")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := fencejwt.ParseSigningKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := fencejwt.ParseKeySet(set)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	f := newFixtureWith(t, "routes:\n  - name: orders\n    path: /orders/{id}\n    resource: orders/{id}\n", store, func(o *Options) {
		o.Tokens = fencejwt.NewVerifier(keys, 5*time.Second, 0)
	})
	return f, signer, store
}

func mint(t *testing.T, s *fencejwt.Signer, fence uint64, res string, ttl time.Duration) string {
	t.Helper()
	tok, err := s.Sign(fencejwt.Claims{Fence: fence, Resource: res, Expiry: time.Now().Add(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// With a keys file, the token header holds a JWS: a valid one is admitted
// or refused by its fence exactly as a plain token; anything else is 401,
// a res for another resource 403, and neither touches the mark.
func TestSignedTokens(t *testing.T) {
	f, signer, store := signedFixture(t)
	_, otherSigner, _ := signedFixture(t) // a key the proxy does not know, with the same kid
	tests := []struct {
		name    string
		path    string
		headers []string
		status  int
		typ     string
		detail  string
		token   string // the problem's token member
	}{
		{"admitted", "/orders/1", []string{"Fencing-Token", mint(t, signer, 42, "", time.Minute)}, 200, "", "", ""},
		{"same token again", "/orders/1", []string{"Fencing-Token", " " + mint(t, signer, 42, "orders/*", time.Minute) + "\t"}, 200, "", "", ""},
		{"stale", "/orders/1", []string{"Fencing-Token", mint(t, signer, 41, "orders/1", time.Minute)}, 409, TypeStaleToken, "older than", "41"},
		{"plain number", "/orders/1", []string{"Fencing-Token", "43"}, 401, TypeTokenInvalid, "not a compact JWS", ""},
		{"forged", "/orders/1", []string{"Fencing-Token", mint(t, otherSigner, 99, "", time.Minute)}, 401, TypeTokenInvalid, "bad signature", ""},
		{"expired", "/orders/1", []string{"Fencing-Token", mint(t, signer, 99, "", -time.Minute)}, 401, TypeTokenInvalid, "expired at", ""},
		{"repeated", "/orders/1", []string{"Fencing-Token", mint(t, signer, 99, "", time.Minute), "Fencing-Token", mint(t, signer, 99, "", time.Minute)}, 401, TypeTokenInvalid, "repeated header", ""},
		{"wrong resource", "/orders/1", []string{"Fencing-Token", mint(t, signer, 99, "orders/2", time.Minute)}, 403, TypeTokenWrongResource, `valid for "orders/2" only`, "99"},
		{"wrong prefix", "/orders/1", []string{"Fencing-Token", mint(t, signer, 99, "invoices/*", time.Minute)}, 403, TypeTokenWrongResource, "invoices/*", "99"},
		{"absent", "/orders/1", nil, 428, TypeTokenRequired, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.do(http.MethodPut, tc.path, tc.headers...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 {
				return
			}
			p := decodeProblem(t, resp, body)
			if p.Type != tc.typ || !strings.Contains(p.Detail, tc.detail) || p.Token != tc.token {
				t.Fatalf("problem %+v, want type %s, detail with %q, token %q", p, tc.typ, tc.detail, tc.token)
			}
			if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("a 401 without WWW-Authenticate")
			}
			for _, h := range tc.headers {
				if len(h) > 40 && strings.Contains(body, h[:40]) {
					t.Fatalf("the answer echoes the token: %s", body)
				}
			}
		})
	}
	// Only the two admissions reached the upstream, and the mark is 42:
	// neither the forged 99 nor the wrong-resource 99 moved it.
	if n := len(f.up.received()); n != 2 {
		t.Fatalf("upstream received %d requests, want 2", n)
	}
	if m, ok, err := store.Mark(t.Context(), "orders/1"); err != nil || !ok || m != 42 {
		t.Fatalf("mark = %d %v %v, want 42", m, ok, err)
	}
	_, metrics := get(t, NewAdmin(AdminOptions{Store: store, Metrics: f.metrics}), "/metrics")
	for _, want := range []string{`fenceproxy_requests_total{decision="invalid",route="orders"} 4`, `fenceproxy_requests_total{decision="wrong_resource",route="orders"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Signed tokens cost one signature check per token: a holder that sends
// many requests with its token is served from the cache (counted by
// BenchmarkSignedTokenCached; here: the answer stays right when it is).
func TestSignedTokenReused(t *testing.T) {
	f, signer, _ := signedFixture(t)
	tok := mint(t, signer, 7, "orders/*", time.Minute)
	for i := range 50 {
		if resp, body := f.do(http.MethodPut, fmt.Sprintf("/orders/%d", i%5), "Fencing-Token", tok); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
}
