package redislease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// With AOF and appendfsync always, a crash loses no acknowledged token: after
// the restart the next token is still greater, and the grant held at the crash
// is still held.
func TestCounterSurvivesCrash(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := ctxT(t)
	p := prefix()
	opts := func(owner string) redislease.Options {
		return redislease.Options{Prefix: p, OwnerID: owner, TTL: time.Minute}
	}

	rdb := redis.NewClient(srv.Options())
	a, b := newLease(rdb, "r", opts("A")), newLease(rdb, "r", opts("B"))
	for _, l := range []*redislease.Lease{a, b} {
		if _, err := l.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last, err := a.Acquire(ctx) // held through the crash
	if err != nil || last != 3 {
		t.Fatalf("Acquire = %d, %v; want 3", last, err)
	}
	_ = rdb.Close()

	srv.Kill() // SIGKILL: no shutdown save; only what fsync wrote survives
	srv.Restart(t)

	rdb = srv.Client(t)
	a, b = newLease(rdb, "r", opts("A")), newLease(rdb, "r", opts("B"))
	if _, err := b.Acquire(ctx); !errors.Is(err, redislease.ErrHeld) {
		t.Fatalf("B after restart: %v, want ErrHeld (A's grant survived)", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("A: Release after restart: %v", err)
	}
	next, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next <= last {
		t.Fatalf("token after the crash %d is not greater than %d before it", next, last)
	}
}
