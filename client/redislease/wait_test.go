package redislease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

type acquired struct {
	token uint64
	err   error
	at    time.Time
}

// AcquireWait returns once the holder releases the lease, or once its TTL
// runs out, with the next token.
func TestAcquireWait(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)

	tests := []struct {
		name    string
		ttl     time.Duration // A's
		release bool          // A releases after holdFor; else its TTL runs out
		holdFor time.Duration
	}{
		{name: "holder releases", ttl: time.Minute, release: true, holdFor: 300 * time.Millisecond},
		{name: "holder's TTL runs out", ttl: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t)
			p := prefix()
			a := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "A", TTL: tt.ttl})
			b := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "B"})
			ta, err := a.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got := make(chan acquired, 1)
			go func() {
				tok, err := b.AcquireWait(ctx, 10*time.Millisecond)
				got <- acquired{tok, err, time.Now()}
			}()

			select {
			case r := <-got:
				t.Fatalf("AcquireWait returned %d, %v while A held the lease", r.token, r.err)
			case <-time.After(150 * time.Millisecond):
			}
			if tt.release {
				time.Sleep(tt.holdFor - time.Since(start))
				if err := a.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}

			select {
			case r := <-got:
				if r.err != nil || r.token <= ta {
					t.Fatalf("AcquireWait = %d, %v; want a token above %d", r.token, r.err, ta)
				}
				if waited := r.at.Sub(start); waited < 250*time.Millisecond {
					t.Fatalf("AcquireWait returned after %v, before the lease was free", waited)
				}
				if b.Token() != r.token {
					t.Fatalf("Token = %d, want %d", b.Token(), r.token)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("AcquireWait did not return after the lease became free")
			}
		})
	}
}

// A context that ends stops every call, and a cancelled one sends nothing.
func TestContextCancellation(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	p := prefix()
	holder := newLease(rdb, "r", redislease.Options{Prefix: p, OwnerID: "holder", TTL: time.Minute})
	if _, err := holder.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	t.Run("AcquireWait until the deadline", func(t *testing.T) {
		l := newLease(rdb, "r", redislease.Options{Prefix: p})
		dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		tok, err := l.AcquireWait(dctx, 20*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) || tok != 0 {
			t.Fatalf("AcquireWait = %d, %v; want DeadlineExceeded", tok, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("returned %v after the deadline", el)
		}
	})

	calls := []struct {
		name string
		call func(*redislease.Lease) error
	}{
		{"Acquire", func(l *redislease.Lease) error { _, err := l.Acquire(cancelled); return err }},
		{"AcquireWait", func(l *redislease.Lease) error { _, err := l.AcquireWait(cancelled, 0); return err }},
		{"Renew", func(l *redislease.Lease) error { return l.Renew(cancelled) }},
		{"Release", func(l *redislease.Lease) error { return l.Release(cancelled) }},
	}
	for _, c := range calls {
		t.Run(c.name+" cancelled", func(t *testing.T) {
			q := prefix()
			l := newLease(rdb, "free", redislease.Options{Prefix: q})
			if err := c.call(l); !errors.Is(err, context.Canceled) {
				t.Fatalf("%s = %v, want context.Canceled", c.name, err)
			}
			if n, _ := rdb.Exists(ctx, q+"lease:free:token").Result(); n != 0 {
				t.Fatal("a token was minted for a cancelled call")
			}
		})
	}
	// The holder was never disturbed.
	if err := holder.Renew(ctx); err != nil {
		t.Fatal(err)
	}
}
