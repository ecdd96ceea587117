package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Releases that ride an admission's script run (batch.go): they never
// delay a waiter of this process, and they get through when Redis refuses
// admissions.

func admitFlight(t *testing.T, s *Store, a fencestore.Admission) fencestore.Flight {
	t.Helper()
	d, err := s.Admit(t.Context(), a)
	if err != nil || !d.Admitted || !d.Flight.Registered() {
		t.Fatalf("Admit(%+v) = %+v, %v; want admitted and in flight", a, d, err)
	}
	return d.Flight
}

// A release that a Drain of this process waits for does not linger for an
// admission to ride: with the linger set to an hour, the Drain still
// returns once the older request is released, not after the hour or the
// older one's bound.
func TestReleaseAwaitedDoesNotLinger(t *testing.T) {
	srv := redistest.Start(t)
	s := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "fence:awaited:", ReleaseLinger: time.Hour, DrainPoll: time.Hour})
	defer s.Close()
	older := admitFlight(t, s, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Hour})
	newer := admitFlight(t, s, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Hour})
	if !newer.Older {
		t.Fatal("42 does not see 41 in flight")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Drain(ctx, newer)
		done <- err
	}()
	redistest.Poll(t, 10*time.Second, "the Drain waiting for 41", func() error {
		if !s.awaited(older.Ref) {
			return errors.New("not yet")
		}
		return nil
	})
	s.Release(older)
	if err := <-done; err != nil {
		t.Fatalf("Drain = %v, want 41's release to end it (no linger for an awaited release)", err)
	}
}

// A release with no admission to ride goes alone once its linger is over:
// 41's entry leaves the store with no admission after it.
func TestReleaseAloneAfterLinger(t *testing.T) {
	srv := redistest.Start(t)
	s := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "fence:linger:", ReleaseLinger: 50 * time.Millisecond})
	defer s.Close()
	f := admitFlight(t, s, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Hour})
	s.Release(f)
	c := srv.Client(t)
	redistest.Poll(t, 10*time.Second, "41's release applied", func() error {
		if n, err := c.ZCard(t.Context(), f.Key).Result(); err != nil || n != 0 {
			return fmt.Errorf("ZCARD %s = %d, %v", f.Key, n, err)
		}
		return nil
	})
}

// Above maxmemory Redis refuses admissions (the script is not flagged
// allow-oom) but not releases, which free memory: a release that rode a
// refused admission's run goes again on its own in the same exchange, and
// is acknowledged, instead of failing with the admission and waiting for
// its retry.
func TestReleaseRefusedAdmissionGoesAlone(t *testing.T) {
	srv := redistest.Start(t)
	s := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "fence:oom:"})
	defer s.Close()
	c := srv.Client(t)
	ctx := t.Context()
	f := admitFlight(t, s, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Hour})
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	key := s.prefix + "other"
	fkey, _ := flightKey(key)
	a := &admission{ctx: ctx, call: call{keys: [2]string{key, fkey}, tok: "1", mode: "ge", fl: "3600000 oom1"},
		done: make(chan struct{}, 1)}
	_, errs := s.batch.exec([]*admission{a}, []release{{key: f.Key, member: f.Ref}}, nil)
	if a.err == nil || !redis.HasErrorPrefix(a.err, "OOM") {
		t.Fatalf("the admission above maxmemory: %v, %v; want refused (OOM)", a.reply, a.err)
	}
	if len(errs) != 1 || errs[0] != nil {
		t.Fatalf("the release that rode it: %v, want acknowledged", errs)
	}
	if n, err := c.ZCard(ctx, f.Key).Result(); err != nil || n != 0 {
		t.Errorf("ZCARD %s = %d, %v; want 41's entry released", f.Key, n, err)
	}
}

// An in-flight key gets its TTL (the longest flight entered plus GC and a
// day) when an admission creates it, with PEXPIRE NX, and keeps one long
// enough when it existed already: one that held an entry of the same order
// (which no snapshot lists) with too short a TTL is renewed, as is one with
// an older entry.
func TestFlightKeyTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	const gcSet = (48 + 24) * time.Hour // flight.lua's GCSET
	s := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "fence:ttl:"})
	defer s.Close()
	for _, tc := range []struct {
		name string
		// first enters an entry of the resource before the test sets its
		// key's TTL to a minute, when set.
		first *fencestore.Admission
	}{
		{"new key", nil},
		{"an equal order in flight", &fencestore.Admission{Token: 42, Flight: time.Hour}},
		{"an older order in flight", &fencestore.Admission{Token: 41, Flight: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := "r-" + tc.name
			fkey, _ := flightKey(s.prefix + res)
			if tc.first != nil {
				a := *tc.first
				a.Resource = res
				admitFlight(t, s, a)
				if err := c.PExpire(ctx, fkey, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			f := admitFlight(t, s, fencestore.Admission{Resource: res, Token: 42, Flight: 2 * time.Hour})
			ttl, err := c.PTTL(ctx, f.Key).Result()
			if err != nil {
				t.Fatal(err)
			}
			// Set just now: within a minute of the flight plus GCSET.
			if want := 2*time.Hour + gcSet; ttl > want || ttl < want-time.Minute {
				t.Errorf("PTTL %s = %v, want about %v", f.Key, ttl, want)
			}
		})
	}
}

// A snapshot lists the oldest snapshotCap entries ordered before its
// admission; with more in flight, its Drain waits for those and then for
// the rest, never passing one: with the first snapshotCap released it
// still waits, and it ends once the rest are released too. The waiter
// looks at the store only every minute: it learns of every release, those
// past the snapshot's first part included, from its announcement.
func TestSnapshotCapped(t *testing.T) {
	srv := redistest.Start(t)
	const olders = snapshotCap + 44
	a := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "fence:cap:"})
	defer a.Close()
	b := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "fence:cap:", DrainPoll: time.Minute})
	defer b.Close()
	var flights []fencestore.Flight
	for i := 1; i <= olders; i++ {
		flights = append(flights, admitFlight(t, a, fencestore.Admission{Resource: "r", Token: 1, Sequence: uint64(i),
			HasSequence: true, Flight: time.Hour}))
	}
	newer := admitFlight(t, b, fencestore.Admission{Resource: "r", Token: 1, Sequence: olders + 1, HasSequence: true,
		Flight: time.Hour})
	fl, ok := b.flights.get(newer.Ref)
	if !newer.Older || !ok || len(fl.olders) != snapshotCap || !fl.more {
		t.Fatalf("the newer request's snapshot: older %v, %d entries, more %v; want the first %d of more",
			newer.Older, len(fl.olders), fl.more, snapshotCap)
	}
	for i, o := range fl.olders {
		if o.member != flights[i].Ref {
			t.Fatalf("snapshot entry %d is %q, want the %d-th oldest %q", i, o.member, i+1, flights[i].Ref)
		}
	}
	c := srv.Client(t)
	for _, f := range flights[:snapshotCap] {
		a.Release(f)
	}
	redistest.Poll(t, 10*time.Second, "the first entries released", func() error {
		if n, err := inFlight(t, c, newer.Key); err != nil || n != olders-snapshotCap+1 {
			return fmt.Errorf("%d in flight, %v", n, err)
		}
		return nil
	})
	// The rest are in flight: the Drain cannot end, only run out of time.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := b.Drain(ctx, newer)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with %d older entries in flight past the snapshot's first part = %v, want to wait for them",
			olders-snapshotCap, err)
	}
	for _, f := range flights[snapshotCap:] {
		a.Release(f)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if expired, err := b.Drain(ctx, newer); err != nil || expired {
		t.Fatalf("Drain after every older entry's release = (%v, %v), want (false, nil)", expired, err)
	}
	if n, err := c.ZCard(t.Context(), newer.Key).Result(); err != nil || n != 1 {
		t.Errorf("ZCARD after the Drain = %d, %v; want the newer entry alone, no flag left", n, err)
	}
}

// inFlight counts the entries of an in-flight key, its flags (flight.lua's
// WAITED, which sort after every entry) left out.
func inFlight(t *testing.T, c *redis.Client, key string) (int64, error) {
	return c.ZLexCount(t.Context(), key, "-", "(~").Result()
}
