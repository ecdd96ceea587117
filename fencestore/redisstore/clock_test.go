package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// steppedServer starts redis-server with redistest's clock shim preloaded
// and returns it with a function that steps its wall clock to the real one
// plus offset (its monotonic clock never moves), checked on TIME.
func steppedServer(t *testing.T) (*redistest.Server, func(offset time.Duration)) {
	t.Helper()
	shim, err := redistest.BuildClockShim(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartEnv(t, shim.Env())
	c := srv.Client(t)
	step := func(offset time.Duration) {
		t.Helper()
		if err := shim.Step(offset); err != nil {
			t.Fatal(err)
		}
		now, err := c.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if off := now.Sub(time.Now()); off < offset-5*time.Second || off > offset+5*time.Second {
			t.Fatalf("redis-server's clock is %v off, want %v: the shim does not step it", off, offset)
		}
	}
	step(0)
	return srv, step
}

// A step of Redis's wall clock decides nothing in the barrier: forward by
// a minute, it does not let 42 start while 41 is within its bound (the
// in-flight entry, and its key, stay); back by an hour, it does not hold 44
// past 43's bound and the margin. Each waiter times the older request on
// its own monotonic clock.
func TestBarrierIgnoresServerClock(t *testing.T) {
	srv, step := steppedServer(t)
	// DrainPoll short: a store that asks Redis's clock would notice the
	// step at once.
	a, b := replicas(t, srv, redisstore.Options{DrainPoll: 20 * time.Millisecond})

	t.Run("forward", func(t *testing.T) {
		defer step(0)
		const bound = 5 * time.Second
		old := flyThrough(t, a, fencestore.Admission{Resource: "fwd", Token: 41, Flight: bound})
		newer := flyThrough(t, b, fencestore.Admission{Resource: "fwd", Token: 42, Flight: bound})
		if !newer.Older {
			t.Fatal("42 does not see 41 in flight")
		}
		done := make(chan error, 1)
		go func() {
			expired, err := b.Drain(t.Context(), newer)
			if err == nil && expired {
				err = context.DeadlineExceeded
			}
			done <- err
		}()
		step(time.Minute)
		select {
		case err := <-done:
			t.Fatalf("42 passed 41, which is within its %v bound, once Redis's clock stepped a minute forward (Drain: %v)", bound, err)
		case <-time.After(time.Second):
		}
		a.Release(old)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Drain after 41's release: %v, want it released (not expired)", err)
			}
		case <-time.After(bound):
			t.Fatal("42 still waiting after 41's release")
		}
		b.Release(newer)
	})

	t.Run("back", func(t *testing.T) {
		defer step(0)
		const bound = 500 * time.Millisecond
		flyThrough(t, a, fencestore.Admission{Resource: "back", Token: 43, Flight: bound}) // never released
		start := time.Now()
		newer := flyThrough(t, b, fencestore.Admission{Resource: "back", Token: 44, Flight: time.Minute})
		if !newer.Older {
			t.Fatal("44 does not see 43 in flight")
		}
		step(-time.Hour)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		expired, err := b.Drain(ctx, newer)
		waited := time.Since(start)
		t.Logf("44 gave 43 up after %v (bound %v, margin %v), Redis's clock an hour back", waited, bound, fencestore.AbandonMargin)
		if err != nil || !expired {
			t.Fatalf("Drain = (%v, %v) after %v, want (true, nil): Redis's clock an hour back held 44 past 43's bound and the margin",
				expired, err, waited)
		}
		if waited < bound+fencestore.AbandonMargin {
			t.Errorf("44 gave 43 up after %v, before its bound and the margin", waited)
		}
		b.Release(newer)
	})
}
