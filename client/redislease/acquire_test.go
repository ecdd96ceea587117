package redislease_test

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

func TestAcquireMintsIncreasingTokens(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	p := prefix()
	a := newLease(rdb, "orders/42", redislease.Options{Prefix: p, OwnerID: "A", TTL: time.Minute})
	b := newLease(rdb, "orders/42", redislease.Options{Prefix: p, OwnerID: "B", TTL: time.Minute})

	steps := []struct {
		name  string
		lease *redislease.Lease
		want  uint64
	}{
		{"A first", a, 1},
		{"B after A released", b, 2},
		{"A again after B released", a, 3},
	}
	for _, st := range steps {
		tok, err := st.lease.Acquire(ctx)
		if err != nil || tok != st.want {
			t.Fatalf("%s: Acquire = %d, %v; want %d", st.name, tok, err, st.want)
		}
		if got := st.lease.Token(); got != st.want {
			t.Fatalf("%s: Token = %d, want %d", st.name, got, st.want)
		}
		if err := st.lease.Release(ctx); err != nil {
			t.Fatalf("%s: Release: %v", st.name, err)
		}
		if got := st.lease.Token(); got != 0 {
			t.Fatalf("%s: Token after Release = %d, want 0", st.name, got)
		}
	}

	// The layout the package doc promises: the counter is a plain decimal
	// with no TTL; the lease key is gone after Release.
	counter := p + "orders/42:token"
	if v, err := rdb.Get(ctx, counter).Result(); err != nil || v != "3" {
		t.Fatalf("GET %s = %q, %v; want 3", counter, v, err)
	}
	if ttl, err := rdb.PTTL(ctx, counter).Result(); err != nil || ttl != -1 {
		t.Fatalf("PTTL %s = %v, %v; want -1 (no expiry)", counter, ttl, err)
	}
	if n, _ := rdb.Exists(ctx, p+"orders/42").Result(); n != 0 {
		t.Fatal("the lease key outlived Release")
	}
}

// A held lease refuses other owners, and a refusal mints nothing; its owner
// acquiring again gets a new token.
func TestHeldLeaseRefusesOthers(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	p := prefix()
	a := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "A", TTL: time.Minute})
	b := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "B", TTL: time.Minute})

	if tok, err := a.Acquire(ctx); err != nil || tok != 1 {
		t.Fatalf("A: Acquire = %d, %v", tok, err)
	}
	for range 3 {
		tok, err := b.Acquire(ctx)
		if !errors.Is(err, redislease.ErrHeld) || tok != 0 {
			t.Fatalf("B: Acquire = %d, %v; want ErrHeld", tok, err)
		}
	}
	if b.Token() != 0 {
		t.Fatalf("B: Token = %d after refusals", b.Token())
	}
	if v, _ := rdb.Get(ctx, p+"r:token").Result(); v != "1" {
		t.Fatalf("counter = %q after refused acquisitions, want 1", v)
	}
	if v, _ := rdb.Get(ctx, p+"r").Result(); v != "A" {
		t.Fatalf("lease key = %q, want A", v)
	}
	// Re-acquiring while holding: a new token, still the same owner.
	if tok, err := a.Acquire(ctx); err != nil || tok != 2 || a.Token() != 2 {
		t.Fatalf("A: re-Acquire = %d, %v (Token %d); want 2", tok, err, a.Token())
	}
	if err := b.Release(ctx); !errors.Is(err, redislease.ErrNotHeld) {
		t.Fatalf("B: Release = %v, want ErrNotHeld", err)
	}
	if err := b.Renew(ctx); !errors.Is(err, redislease.ErrNotHeld) {
		t.Fatalf("B: Renew = %v, want ErrNotHeld", err)
	}
	if v, _ := rdb.Get(ctx, p+"r").Result(); v != "A" {
		t.Fatalf("B's Release or Renew touched A's lease: %q", v)
	}
}

func TestDefaults(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	name := "defaults-" + prefix()
	a := redislease.New(rdb, name, redislease.Options{})
	b := redislease.New(rdb, name, redislease.Options{})
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Release(ctx) })
	owner, err := rdb.Get(ctx, "fencelease:"+name).Result()
	if err != nil {
		t.Fatalf("the lease is not under the default prefix: %v", err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(owner) {
		t.Fatalf("default owner id %q is not 128 bits in hex", owner)
	}
	ttl, _ := rdb.PTTL(ctx, "fencelease:"+name).Result()
	if ttl <= 9*time.Second || ttl > redislease.DefaultTTL {
		t.Fatalf("PTTL = %v, want about %v", ttl, redislease.DefaultTTL)
	}
	// Two leases with default owner ids are two owners.
	if _, err := b.Acquire(ctx); !errors.Is(err, redislease.ErrHeld) {
		t.Fatalf("second default-owner lease: %v, want ErrHeld", err)
	}
}

// Errors say what went wrong: an unreachable server is not "held", a corrupt
// counter grants nothing.
func TestAcquireErrors(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)

	tests := []struct {
		name    string
		counter string // value written to the counter first; "" = none
		lease   string
	}{
		{"empty name", "", ""},
		{"counter not an integer", "abc", "c1"},
		{"counter negative", "-5", "c2"},
		{"counter at the top of int64", "9223372036854775807", "c3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := prefix()
			if tt.counter != "" {
				if err := rdb.Set(ctx, p+tt.lease+":token", tt.counter, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			l := newLease(rdb, tt.lease, redislease.Options{Prefix: p})
			tok, err := l.Acquire(ctx)
			if err == nil || errors.Is(err, redislease.ErrHeld) || tok != 0 {
				t.Fatalf("Acquire = %d, %v; want a failure that is not ErrHeld", tok, err)
			}
			t.Log(err)
			if n, _ := rdb.Exists(ctx, p+tt.lease).Result(); n != 0 {
				t.Fatal("the lease was granted")
			}
		})
	}

	t.Run("server gone", func(t *testing.T) {
		l := newLease(rdb, "gone", redislease.Options{})
		srv.Kill()
		tok, err := l.Acquire(ctx)
		if err == nil || errors.Is(err, redislease.ErrHeld) || tok != 0 {
			t.Fatalf("Acquire = %d, %v; want a connection error", tok, err)
		}
		t.Log(err)
		if err := l.Renew(ctx); err == nil || errors.Is(err, redislease.ErrNotHeld) {
			t.Fatalf("Renew = %v, want a connection error, not ErrNotHeld", err)
		}
		if err := l.Release(ctx); err == nil || errors.Is(err, redislease.ErrNotHeld) {
			t.Fatalf("Release = %v, want a connection error, not ErrNotHeld", err)
		}
	})
}
