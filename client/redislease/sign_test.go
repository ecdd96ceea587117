package redislease_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// newSigningKey makes a key of kind as `fenceproxy token keygen` does, and
// returns it for the lease and the key set a proxy would verify with.
func newSigningKey(t *testing.T, kind string) (*redislease.SigningKey, *fencejwt.KeySet) {
	t.Helper()
	priv, set, err := fencejwt.NewKey(kind, "k-"+kind)
	if err != nil {
		t.Fatal(err)
	}
	key, err := redislease.ParseSigningKey(priv)
	if err != nil {
		t.Fatalf("ParseSigningKey: %v", err)
	}
	keys, err := fencejwt.ParseKeySet(set)
	if err != nil {
		t.Fatal(err)
	}
	return key, keys
}

// verify checks the lease's signed token as a proxy would, and that its
// fence is the lease's token.
func verify(t *testing.T, l *redislease.Lease, keys *fencejwt.KeySet) (string, fencejwt.Claims) {
	t.Helper()
	signed := l.SignedToken()
	c, err := fencejwt.Verify(signed, keys, time.Now(), 0)
	if err != nil {
		t.Fatalf("the signed token %q does not verify: %v", signed, err)
	}
	if c.Fence != l.Token() || c.Fence == 0 {
		t.Fatalf("fence %d, Token %d", c.Fence, l.Token())
	}
	return signed, c
}

// wantExp checks that exp is lifetime after the call that ran from before
// to after; Sign rounds exp up to a whole second.
func wantExp(t *testing.T, exp, before, after time.Time, lifetime time.Duration) {
	t.Helper()
	if exp.Before(before.Add(lifetime)) || exp.After(after.Add(lifetime+time.Second)) {
		t.Fatalf("exp %v, want %v after the call (%v to %v)", exp, lifetime, before, after)
	}
}

// For each kind of key: a grant mints a signed token whose fence is the
// token and whose exp is the TTL plus the grace; a renewal mints a new one
// for the same fence with a later exp; a release forgets it.
func TestSignedTokenOnGrantAndRenewal(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tests := []struct {
		kind  string
		grace time.Duration
		res   string
		life  time.Duration // of each token after its call: TTL + grace
	}{
		{kind: fencejwt.KindEdDSA, grace: 3 * time.Second, res: "orders/42", life: 5 * time.Second},
		{kind: fencejwt.KindES256, grace: 0, res: "orders/*", life: 2 * time.Second},
		{kind: fencejwt.KindHS256, grace: -time.Minute, life: 2 * time.Second}, // negative is zero
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			ctx := ctxT(t)
			key, keys := newSigningKey(t, tt.kind)
			if key.KID() != "k-"+tt.kind {
				t.Fatalf("KID = %q", key.KID())
			}
			l := newLease(rdb, "orders/42", redislease.Options{TTL: 2 * time.Second, SigningKey: key, SignGrace: tt.grace, SignResource: tt.res})

			before := time.Now()
			tok, err := l.Acquire(ctx)
			after := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			first, c := verify(t, l, keys)
			if c.Fence != tok || c.Resource != tt.res || !c.Covers("orders/42") {
				t.Fatalf("claims %+v after Acquire = %d", c, tok)
			}
			wantExp(t, c.Expiry, before, after, tt.life)

			// A second later, so that the whole-second exp must move.
			time.Sleep(1100 * time.Millisecond)
			before = time.Now()
			if err := l.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			after = time.Now()
			second, c2 := verify(t, l, keys)
			if second == first || c2.Fence != tok || !c2.Expiry.After(c.Expiry) {
				t.Fatalf("after Renew: same token %v, fence %d (want %d), exp %v (before %v)", second == first, c2.Fence, tok, c2.Expiry, c.Expiry)
			}
			wantExp(t, c2.Expiry, before, after, tt.life)

			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l.SignedToken() != "" || l.Token() != 0 {
				t.Fatalf("after Release: SignedToken %q, Token %d", l.SignedToken(), l.Token())
			}
		})
	}
}

// AcquireWait mints at its grant too; the next holder's signed token carries
// its greater fence, while the old one still verifies: signing does not
// fence, the proxy's mark does.
func TestSignedTokenAcquireWait(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	key, keys := newSigningKey(t, fencejwt.KindEdDSA)
	p := prefix()
	opts := redislease.Options{Prefix: p, TTL: 300 * time.Millisecond, SigningKey: key, SignGrace: time.Minute}
	opts.OwnerID = "A"
	a := newLease(rdb, "r", opts)
	opts.OwnerID = "B"
	b := newLease(rdb, "r", opts)

	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	_, ca := verify(t, a, keys)
	old := a.SignedToken()
	tb, err := b.AcquireWait(ctx, 20*time.Millisecond) // after A's TTL runs out
	if err != nil {
		t.Fatal(err)
	}
	_, cb := verify(t, b, keys)
	if cb.Fence != tb || cb.Fence <= ca.Fence {
		t.Fatalf("B's fence %d (token %d), A's %d", cb.Fence, tb, ca.Fence)
	}
	if _, err := fencejwt.Verify(old, keys, time.Now(), 0); err != nil {
		t.Fatalf("A's token within its grace: %v", err)
	}
	if err := a.Renew(ctx); !errors.Is(err, redislease.ErrNotHeld) {
		t.Fatalf("A: Renew = %v, want ErrNotHeld", err)
	}
	if a.SignedToken() != "" {
		t.Fatalf("A: SignedToken %q after ErrNotHeld", a.SignedToken())
	}
}

// Without a key nothing is signed, and the plain token is as before.
func TestNoSigningKeyNoSignedToken(t *testing.T) {
	srv := redistest.Start(t)
	l := newLease(srv.Client(t), "r", redislease.Options{TTL: time.Minute, SignGrace: time.Second, SignResource: "r"})
	tok, err := l.Acquire(ctxT(t))
	if err != nil || tok == 0 || l.Token() != tok {
		t.Fatalf("Acquire = %d, %v; Token %d", tok, err, l.Token())
	}
	if err := l.Renew(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if s := l.SignedToken(); s != "" {
		t.Fatalf("SignedToken = %q without a key", s)
	}
}

// The lease's signed token reaches the proxy through client.Transport byte
// for byte, and verifies there.
func TestSignedTokenThroughTransport(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxT(t)
	key, keys := newSigningKey(t, fencejwt.KindES256)
	l := newLease(srv.Client(t), "orders/42", redislease.Options{TTL: time.Minute, SigningKey: key, SignResource: "orders/42"})
	if _, err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var got []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values("Fencing-Token")...)
		mu.Unlock()
	}))
	defer proxy.Close()
	tr := &client.Transport{Base: proxy.Client().Transport}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(client.WithSignedToken(ctx, l.SignedToken()), http.MethodPut, proxy.URL+"/orders/42", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != l.SignedToken() {
		t.Fatalf("the proxy received %q, want exactly the lease's signed token", got)
	}
	if c, err := fencejwt.Verify(got[0], keys, time.Now(), 0); err != nil || c.Fence != l.Token() || !c.Covers("orders/42") {
		t.Fatalf("as received: %+v, %v", c, err)
	}
}

// SignedToken is safe to read while the lease is renewed and acquired
// again; whatever it returns is empty or verifies.
func TestSignedTokenConcurrentUse(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxT(t)
	key, keys := newSigningKey(t, fencejwt.KindEdDSA)
	l := newLease(srv.Client(t), "r", redislease.Options{TTL: time.Minute, SigningKey: key})
	if _, err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s := l.SignedToken(); s != "" {
					if _, err := fencejwt.Verify(s, keys, time.Now(), 0); err != nil {
						t.Errorf("SignedToken during renewals: %v", err)
						return
					}
				}
				_ = l.Token()
			}
		})
	}
	var renewers sync.WaitGroup
	for range 2 {
		renewers.Go(func() {
			for range 20 {
				if err := l.Renew(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 5 {
		if _, err := l.Acquire(ctx); err != nil { // same owner: a new holding
			t.Error(err)
		}
	}
	renewers.Wait()
	close(stop)
	wg.Wait()
	if _, c := verify(t, l, keys); c.Fence != l.Token() {
		t.Fatalf("after the race: fence %d, Token %d", c.Fence, l.Token())
	}
}

// ParseSigningKey takes only a private JWK, and says what it was given.
func TestParseSigningKeyRefuses(t *testing.T) {
	_, set, err := fencejwt.NewKey(fencejwt.KindEdDSA, "k")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data string
		want string
	}{
		{"a JWK Set", string(set), "keygen's --private file"},
		{"not JSON", "-----BEGIN PRIVATE KEY-----", "not a JWK"},
		{"no kid", `{"kty":"oct","k":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`, "kid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := redislease.ParseSigningKey([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseSigningKey = %v, want an error with %q", err, tt.want)
			}
		})
	}
}
