package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// A lease that mints, a proxy that verifies, with real processes: a
// redis-server holds both the leases (client/redislease) and the proxy's
// marks, the fenceproxy binary verifies the leases' signed tokens against a
// keys file in a ConfigMap-style directory, and an upstream records what it
// is sent. Every write goes out through client.Transport with
// client.WithSignedToken(lease.SignedToken()).

// delivery is one write as the upstream received it, or as the test
// expects it to be received.
type delivery struct {
	path, token, body string
}

// recordingUpstream is the protected service: it records every request it
// receives, in order, as a delivery.
type recordingUpstream = recorder[delivery]

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	return newRecorder(t, func(r *http.Request, body []byte) delivery {
		return delivery{path: r.URL.Path, token: r.Header.Get(client.DefaultHeader), body: string(body)}
	})
}

// recorder is a service that records every request it receives, in order,
// as record makes of it (with its body read), and answers 200 "stored".
type recorder[T any] struct {
	*httptest.Server
	mu  sync.Mutex
	got []T
}

func newRecorder[T any](t *testing.T, record func(r *http.Request, body []byte) T) *recorder[T] {
	u := &recorder[T]{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		x := record(r, body)
		u.mu.Lock()
		u.got = append(u.got, x)
		u.mu.Unlock()
		_, _ = io.WriteString(w, "stored")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *recorder[T]) received() []T {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.got)
}

// newLeaseKey makes a key as `fenceproxy token keygen` does: the private
// JWK parsed for a lease to sign with, and the public key for keySet.
func newLeaseKey(t *testing.T, kind, kid string) (*redislease.SigningKey, testKey) {
	t.Helper()
	priv, set, err := fencejwt.NewKey(kind, kid)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := redislease.ParseSigningKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := fencejwt.ParseSigningKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	var one struct{ Keys []json.RawMessage }
	if err := json.Unmarshal(set, &one); err != nil || len(one.Keys) != 1 {
		t.Fatalf("keygen's set %s: %v", set, err)
	}
	return lk, testKey{signer: signer, public: one.Keys[0]}
}

// wireClaims are the claims of a signed token as sent, read without
// verifying it.
type wireClaims struct {
	Fence string `json:"fence"`
	Exp   int64  `json:"exp"`
	Res   string `json:"res"`
	KID   string `json:"-"`
}

func claimsOf(t *testing.T, token string) wireClaims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %q", token)
	}
	var c wireClaims
	var h struct {
		KID string `json:"kid"`
	}
	for i, v := range []any{&h, &c} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatal(err)
		}
	}
	c.KID = h.KID
	return c
}

func TestLeaseSignedTokensEndToEnd(t *testing.T) {
	rs := redistest.Start(t) // skips with FENCE_SKIP_REDIS=1 when redis-server is missing
	bin := buildBinary(t)
	rdb := rs.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	key1, pub1 := newLeaseKey(t, fencejwt.KindEdDSA, "lease-1")
	key2, pub2 := newLeaseKey(t, fencejwt.KindES256, "lease-2")
	rogueKey, _ := newLeaseKey(t, fencejwt.KindEdDSA, "rogue")      // a kid the set does not have
	impostorKey, _ := newLeaseKey(t, fencejwt.KindEdDSA, "lease-1") // the set's kid, another key
	cm := newConfigMapDir(t, "keys.json", keySet(t, pub1))
	up := newRecordingUpstream(t)
	r := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL":    up.URL,
		"FENCE_STORE":           "redis",
		"FENCE_REDIS_URL":       rs.URL(),
		"FENCE_ROUTES_FILE":     writeRoutes(t, "routes:\n  - name: orders\n    path: /orders/{id:uint}\n    resource: orders/{id}\n"),
		"FENCE_TOKEN_KEYS_FILE": filepath.Join(cm.dir, "keys.json"),
	})
	reloads := func(result string) float64 {
		return r.metric(t, `fenceproxy_config_reloads_total{file="keys",result="`+result+`"}`)
	}
	if ok, bad := reloads("ok"), reloads("error"); ok != 0 || bad != 0 {
		t.Fatalf("keys reloads ok %v, error %v at start; want both 0", ok, bad)
	}

	// newLease is a holder of the lease on orders/7: every holder shares
	// the lease (one name, one token counter) and signs with its own key.
	newLease := func(ttl time.Duration, key *redislease.SigningKey, res string) *redislease.Lease {
		return redislease.New(rdb, "orders/7", redislease.Options{
			TTL: ttl, SigningKey: key, SignResource: res,
			// Longer than the test: a stale holder's token is then still
			// valid, and it is the mark, not its expiry, that refuses it.
			SignGrace: 5 * time.Minute,
		})
	}
	acquire := func(what string, l *redislease.Lease) (uint64, string) {
		t.Helper()
		tok, err := l.AcquireWait(ctx, 10*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: acquire: %v", what, err)
		}
		signed := l.SignedToken()
		if c := claimsOf(t, signed); c.Fence != strconv.FormatUint(tok, 10) {
			t.Fatalf("%s: the signed token's fence is %q, want the lease's token %d", what, c.Fence, tok)
		}
		return tok, signed
	}
	release := func(what string, l *redislease.Lease) {
		t.Helper()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", what, err)
		}
	}

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: &client.Transport{Base: tr}}
	var admitted []delivery
	// send writes body to path through the proxy with the signed token;
	// it returns the proxy's refusal, or nil when the write was admitted.
	send := func(what, token, path, body string) *client.ProblemError {
		t.Helper()
		req, err := http.NewRequestWithContext(client.WithSignedToken(ctx, token), http.MethodPut, r.data+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			var pe *client.ProblemError
			if errors.As(err, &pe) {
				return pe
			}
			t.Fatalf("%s: %v", what, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != "stored" {
			t.Fatalf("%s: %d %q, want the upstream's 200", what, resp.StatusCode, got)
		}
		admitted = append(admitted, delivery{path: path, token: token, body: body})
		return nil
	}
	admit := func(what, token, path, body string) {
		t.Helper()
		if pe := send(what, token, path, body); pe != nil {
			t.Fatalf("%s: refused, want admitted: %v", what, pe)
		}
	}
	refuse := func(what, token, path string, want error, status int, detail string) *client.ProblemError {
		t.Helper()
		pe := send(what, token, path, "refused: "+what)
		switch {
		case pe == nil:
			t.Fatalf("%s: admitted, want %d (%v)", what, status, want)
		case !errors.Is(pe, want) || pe.Status != status || !strings.Contains(pe.Detail, detail):
			t.Fatalf("%s: %d %s %q, want %d (%v) with %q", what, pe.Status, pe.Type, pe.Detail, status, want, detail)
		}
		return pe
	}
	wantMark := func(what string, want uint64) {
		t.Helper()
		if got := getMark(t, rdb, "fence:orders/7"); got != strconv.FormatUint(want, 10) {
			t.Fatalf("%s: the mark of orders/7 is %s, want %d", what, got, want)
		}
	}

	// A holds the lease and writes; its lease runs out while it pauses.
	a := newLease(400*time.Millisecond, key1, "orders/7")
	tokA, signedA := acquire("A", a)
	admit("A's write", signedA, "/orders/7", "A1")

	// B is granted the lease once A's has expired, and writes.
	b := newLease(20*time.Second, key1, "orders/7")
	tokB, signedB := acquire("B", b)
	if tokB <= tokA {
		t.Fatalf("B's token %d is not above A's %d", tokB, tokA)
	}
	admit("B's write", signedB, "/orders/7", "B1")

	// A wakes up with a signed token that still verifies: the mark refuses it.
	pe := refuse("A's late write", signedA, "/orders/7", client.ErrStaleToken, http.StatusConflict, "older than")
	if pe.Type != "urn:fenceproxy:stale-token" || strconv.FormatUint(pe.Token, 10) != claimsOf(t, signedA).Fence ||
		!pe.HasMark || pe.HighWaterMark != tokB || pe.Resource != "orders/7" {
		t.Fatalf("A's late write: %+v, want stale-token with token %d (its fence claim) and mark %d", *pe, tokA, tokB)
	}
	if err := a.Renew(ctx); !errors.Is(err, redislease.ErrNotHeld) || a.SignedToken() != "" {
		t.Fatalf("A's renewal: %v, signed token %q; want ErrNotHeld and none", err, a.SignedToken())
	}

	// B renews: a new signed token for the same fence, expiring later. The
	// exp is in whole seconds, so let one pass.
	time.Sleep(1100 * time.Millisecond)
	if err := b.Renew(ctx); err != nil {
		t.Fatalf("B's renewal: %v", err)
	}
	renewedB := b.SignedToken()
	c1, c2 := claimsOf(t, signedB), claimsOf(t, renewedB)
	if renewedB == signedB || c2.Fence != c1.Fence || c2.Fence != strconv.FormatUint(tokB, 10) || c2.Exp <= c1.Exp || b.Token() != tokB {
		t.Fatalf("B's renewal minted %+v (same header: %v), want a new token for fence %d with a later exp than %+v",
			c2, renewedB == signedB, tokB, c1)
	}
	admit("B's write after renewal", renewedB, "/orders/7", "B2")
	release("B", b)

	// Tokens of keys the set does not hold: refused before the mark.
	rogue := newLease(20*time.Second, rogueKey, "orders/7")
	_, signedRogue := acquire("the rogue", rogue)
	refuse("a token of a key not in the set", signedRogue, "/orders/7", client.ErrTokenInvalid, http.StatusUnauthorized, `no key with kid "rogue"`)
	release("the rogue", rogue)
	impostor := newLease(20*time.Second, impostorKey, "orders/7")
	_, signedImpostor := acquire("the impostor", impostor)
	refuse("a token of another key with the set's kid", signedImpostor, "/orders/7", client.ErrTokenInvalid, http.StatusUnauthorized, `bad signature for key "lease-1"`)
	release("the impostor", impostor)

	// A lease whose tokens name another resource.
	elsewhere := newLease(20*time.Second, key1, "orders/8")
	tokE, signedE := acquire("the lease signing for orders/8", elsewhere)
	pe = refuse("a token for orders/8 on orders/7", signedE, "/orders/7", client.ErrTokenWrongResource, http.StatusForbidden, `"orders/8"`)
	if pe.Type != "urn:fenceproxy:token-wrong-resource" || pe.Token != tokE || pe.Resource != "orders/7" {
		t.Fatalf("wrong resource: %+v, want token %d on orders/7", *pe, tokE)
	}
	admit("the same token on orders/8", signedE, "/orders/8", "E1")
	release("the lease signing for orders/8", elsewhere)
	// The refused tokens were all above B's, and moved nothing.
	wantMark("after the 401s and the 403", tokB)

	// Rotation. O holds the lease with the old key.
	o := newLease(20*time.Second, key1, "orders/7")
	_, signedO := acquire("O", o)
	admit("O's write, old key", signedO, "/orders/7", "O1")
	release("O", o)
	// The lease service switched to the new key too early: its tokens are
	// refused until the proxy has the new key.
	n := newLease(20*time.Second, key2, "orders/7")
	tokN, signedN := acquire("N", n)
	if kid := claimsOf(t, signedN).KID; kid != "lease-2" {
		t.Fatalf("N's token names kid %q, want lease-2", kid)
	}
	refuse("the new key before the proxy has it", signedN, "/orders/7", client.ErrTokenInvalid, http.StatusUnauthorized, `no key with kid "lease-2"`)
	// Step 1: the new key published beside the old one (a ConfigMap update).
	cm.swap("keys.json", keySet(t, pub1, pub2))
	waitFor(t, "the keys file with both keys reloaded", func() bool { return reloads("ok") == 1 })
	admit("the new key once reloaded", signedN, "/orders/7", "N1")
	// The old key still verifies: O's token reaches the mark, which refuses it.
	refuse("O's token after N wrote", signedO, "/orders/7", client.ErrStaleToken, http.StatusConflict, "older than")
	// Step 2: the old key removed.
	cm.swap("keys.json", keySet(t, pub2))
	waitFor(t, "the keys file without the old key reloaded", func() bool { return reloads("ok") == 2 })
	refuse("O's token, its key removed", signedO, "/orders/7", client.ErrTokenInvalid, http.StatusUnauthorized, `no key with kid "lease-1"`)
	admit("the new key after the old one was removed", signedN, "/orders/7", "N2")
	release("N", n)
	late := newLease(20*time.Second, key1, "orders/7")
	_, signedLate := acquire("a holder still on the old key", late)
	refuse("a fresh token of the removed key", signedLate, "/orders/7", client.ErrTokenInvalid, http.StatusUnauthorized, `no key with kid "lease-1"`)
	release("a holder still on the old key", late)
	wantMark("after the rotation", tokN)
	if bad := reloads("error"); bad != 0 {
		t.Fatalf("%v keys reloads failed, want none", bad)
	}

	// The upstream received the admitted writes, each with its signed token
	// byte for byte, and nothing else.
	if got := up.received(); !slices.Equal(got, admitted) {
		t.Fatalf("the upstream received:\n%s\nwant exactly the admitted writes:\n%s", deliveries(got), deliveries(admitted))
	}
	if len(admitted) != 7 {
		t.Fatalf("%d writes admitted, want 7", len(admitted))
	}
}

func deliveries(ds []delivery) string {
	var b strings.Builder
	for _, d := range ds {
		tok := d.token
		if len(tok) > 24 {
			tok = tok[:12] + "..." + tok[len(tok)-8:]
		}
		fmt.Fprintf(&b, "  PUT %s %q token %s\n", d.path, d.body, tok)
	}
	return b.String()
}
