package redislease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// The scenario fencing exists for: A pauses past its TTL, B takes the lease
// with a greater token, and A, resuming, can neither extend nor delete B's
// lease; it learns it lost the lease.
func TestExpiryLetsAnotherOwnerIn(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	p := prefix()
	const ttl = 200 * time.Millisecond
	a := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "A", TTL: ttl})
	b := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "B", TTL: time.Minute})

	ta, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, redislease.ErrHeld) {
		t.Fatalf("B before expiry: %v, want ErrHeld", err)
	}
	time.Sleep(ttl + 100*time.Millisecond) // A "pauses", without renewing

	tb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatalf("B after expiry: %v", err)
	}
	if tb <= ta {
		t.Fatalf("B's token %d is not greater than A's %d", tb, ta)
	}
	// A still reports its token: it cannot know without asking.
	if a.Token() != ta {
		t.Fatalf("A: Token = %d before asking Redis, want %d", a.Token(), ta)
	}
	if err := a.Renew(ctx); !errors.Is(err, redislease.ErrNotHeld) {
		t.Fatalf("A: Renew = %v, want ErrNotHeld", err)
	}
	if a.Token() != 0 {
		t.Fatalf("A: Token = %d after ErrNotHeld, want 0", a.Token())
	}
	if err := a.Release(ctx); !errors.Is(err, redislease.ErrNotHeld) {
		t.Fatalf("A: Release = %v, want ErrNotHeld", err)
	}
	if v, _ := rdb.Get(ctx, p+"r").Result(); v != "B" {
		t.Fatalf("lease key = %q after A's late Renew and Release, want B", v)
	}
	if pttl, _ := rdb.PTTL(ctx, p+"r").Result(); pttl <= ttl {
		t.Fatalf("B's TTL was cut to %v by A's Renew", pttl)
	}
	if err := b.Renew(ctx); err != nil {
		t.Fatalf("B: Renew = %v", err)
	}
}

// Renewing within each TTL keeps the lease past its first TTL, with the same
// token.
func TestRenewKeepsTheLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	p := prefix()
	const ttl = 400 * time.Millisecond
	a := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "A", TTL: ttl})
	b := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "B"})

	tok, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // 4 x 200ms: twice the TTL
		time.Sleep(ttl / 2)
		if err := a.Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if _, err := b.Acquire(ctx); !errors.Is(err, redislease.ErrHeld) {
			t.Fatalf("B: %v, want ErrHeld while A renews", err)
		}
	}
	if a.Token() != tok {
		t.Fatalf("Token = %d after renewals, want %d", a.Token(), tok)
	}
	pttl, _ := rdb.PTTL(ctx, p+"r").Result()
	if pttl <= 0 || pttl > ttl {
		t.Fatalf("PTTL = %v, want in (0, %v]", pttl, ttl)
	}
}
