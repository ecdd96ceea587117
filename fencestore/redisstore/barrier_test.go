package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// replicas returns two stores on srv under one key prefix, each with a
// client of its own: two fenceproxy replicas sharing the store.
func replicas(t *testing.T, srv *redistest.Server, opts redisstore.Options) (a, b *redisstore.Store) {
	t.Helper()
	_, prefix := newStore(t, srv, redisstore.Options{}) // a prefix of its own
	opts.KeyPrefix = prefix
	a = redisstore.New(redis.NewClient(srv.Options()), opts)
	b = redisstore.New(redis.NewClient(srv.Options()), opts)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

func flyThrough(t *testing.T, s *redisstore.Store, a fencestore.Admission) fencestore.Flight {
	t.Helper()
	d, err := s.Admit(t.Context(), a)
	if err != nil || !d.Admitted || !d.Flight.Registered() {
		t.Fatalf("Admit(%+v) = %+v, %v; want admitted and in flight", a, d, err)
	}
	return d.Flight
}

// Two replicas: 42 through B waits for 41 through A, and A's release wakes
// B's Drain through the channel within a few milliseconds, long before B
// would look again on its own (DrainPoll 5s).
func TestDrainAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			const poll = 5 * time.Second
			tc.opts.DrainPoll = poll
			a, b := replicas(t, srv, tc.opts)
			old := flyThrough(t, a, fencestore.Admission{Resource: "orders/42", Token: 41, Flight: time.Minute})
			newer := flyThrough(t, b, fencestore.Admission{Resource: "orders/42", Token: 42, Flight: time.Minute})
			if !newer.Older {
				t.Fatal("42 through B does not see 41 in flight through A")
			}
			type drained struct {
				expired bool
				err     error
				at      time.Time
			}
			ch := make(chan drained, 1)
			go func() {
				exp, err := b.Drain(t.Context(), newer)
				ch <- drained{exp, err, time.Now()}
			}()
			select {
			case d := <-ch:
				t.Fatalf("B's Drain returned (%v, %v) while 41 is in flight through A", d.expired, d.err)
			case <-time.After(300 * time.Millisecond):
			}
			released := time.Now()
			a.Release(old)
			select {
			case d := <-ch:
				if d.err != nil || d.expired {
					t.Fatalf("B's Drain = (%v, %v), want (false, nil)", d.expired, d.err)
				}
				latency := d.at.Sub(released)
				t.Logf("B's Drain woke %v after A's Release", latency)
				if latency > poll/5 {
					t.Errorf("B's Drain woke %v after the release: the poll, not the channel", latency)
				}
			case <-time.After(2 * poll):
				t.Fatal("B's Drain still waiting after A released 41")
			}
			b.Release(newer)
		})
	}
}

// A replica that dies with a request in flight holds the others back until
// each waiter has watched that request, on its own clock, for the request's
// bound and fencestore.AbandonMargin, and no longer: the waiter then removes
// it, and a later request finds it gone.
func TestDrainDeadReplica(t *testing.T) {
	srv := redistest.Start(t)
	a, b := replicas(t, srv, redisstore.Options{DrainPoll: 5 * time.Second})
	const flight = 500 * time.Millisecond
	flyThrough(t, a, fencestore.Admission{Resource: "r", Token: 41, Flight: flight})
	_ = a.Close() // dies: never releases
	start := time.Now()
	newer := flyThrough(t, b, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute})
	if !newer.Older {
		t.Fatal("42 does not see 41 in flight")
	}
	expired, err := b.Drain(t.Context(), newer)
	waited := time.Since(start)
	t.Logf("Drain returned (%v, %v) %v after 42's admission (41's bound %v, margin %v)", expired, err, waited, flight, fencestore.AbandonMargin)
	if err != nil || !expired {
		t.Fatalf("Drain = (%v, %v), want (true, nil): 41 abandoned", expired, err)
	}
	if waited < flight+fencestore.AbandonMargin {
		t.Errorf("Drain returned %v after 42's admission, before 41's bound and the margin", waited)
	}
	if waited > flight+fencestore.AbandonMargin+5*time.Second {
		t.Errorf("Drain returned %v after 42's admission, long after 41's bound and the margin", waited)
	}
	b.Release(newer)
	later := flyThrough(t, b, fencestore.Admission{Resource: "r", Token: 43, Flight: time.Minute})
	if later.Older {
		members, _ := srv.Client(t).ZRange(t.Context(), later.Key, 0, -1).Result()
		t.Errorf("43 finds 41 (abandoned) or 42 (released) still in flight: %q", members)
	}
	b.Release(later)
}

// release.lua announces a release, naming its member, only when an
// admission ordered after it found it in flight: nobody else can be
// waiting for it.
func TestScriptReleasePublishes(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	admit, release := redisstore.AdmitSource, redisstore.ReleaseSource
	const key, fkey, channel = "res", "{res}:inflight", "ch"
	ps := c.Subscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the subscription
		t.Fatal(err)
	}
	enter := func(token, seq, id string) string {
		t.Helper()
		r, err := c.Eval(ctx, admit, []string{key, fkey}, token, "ge", seq, "60000 "+id, "").Slice()
		if err != nil || len(r) != 7 || r[0] != int64(1) {
			t.Fatalf("admit %s: %v, %v", token, r, err)
		}
		return r[2].(string)
	}
	// nextMessage returns the payload of the next message: after each
	// release the test publishes "-" itself, so a release that published
	// nothing reads as "-".
	nextMessage := func() string {
		t.Helper()
		if err := c.Publish(ctx, channel, "-").Err(); err != nil {
			t.Fatal(err)
		}
		m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		msg, ok := m.(*redis.Message)
		if !ok {
			t.Fatalf("received %T", m)
		}
		if msg.Payload != "-" {
			if m, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil || m.(*redis.Message).Payload != "-" {
				t.Fatalf("after %q: %v, %v; want the test's own \"-\"", msg.Payload, m, err)
			}
		}
		return msg.Payload
	}
	rel := func(member string) int64 {
		t.Helper()
		n, err := c.Eval(ctx, release, []string{fkey}, member, channel).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	m41, m42 := enter("41", "", "a"), enter("42", "", "b")
	if n := rel(m42); n != 1 {
		t.Fatalf("release of 42 removed %d", n)
	}
	if got := nextMessage(); got != "-" {
		t.Errorf("release of 42 (nothing after it) published %q", got)
	}
	m43 := enter("43", "", "c")
	if n := rel(m41); n != 1 {
		t.Fatalf("release of 41 removed %d", n)
	}
	if got := nextMessage(); got != m41 {
		t.Errorf("release of 41 (43 after it) published %q, want %q", got, m41)
	}
	if n := rel(m41); n != 0 {
		t.Errorf("release of 41 twice removed %d", n)
	}
	if got := nextMessage(); got != "-" {
		t.Errorf("release of 41 twice published %q", got)
	}
	// An equal order never waits, so it is no reason to publish.
	enter("43", "", "d")
	if n := rel(m43); n != 1 {
		t.Fatalf("release of 43 removed %d", n)
	}
	if got := nextMessage(); got != "-" {
		t.Errorf("release of 43 (an equal 43 after it) published %q", got)
	}
	// (43, no sequence) comes before (43, 0): its release announces.
	enter("43", "0", "e")
	order := m43[:41] // the member unknown: by order and id
	if n := rel(order + ":*:d"); n != 1 {
		t.Fatalf("release of %s:*:d removed %d", order, n)
	}
	if got := nextMessage(); !strings.HasPrefix(got, m43[:41]) || !strings.HasSuffix(got, ":d") {
		t.Errorf("release of 43 by order and id (43:0 after it) published %q, want its member", got)
	}
	if members, err := c.ZRange(ctx, fkey, 0, -1).Result(); err != nil || len(members) != 1 || !strings.HasSuffix(members[0], ":e") {
		t.Errorf("left in flight: %q, %v; want (43, 0) alone", members, err)
	}
	// (43, no sequence) admitted after (43, 0), which did not find it in
	// flight and so does not wait for it: its release is not announced,
	// though an entry ordered after it is in flight.
	m43f := enter("43", "", "f")
	if n := rel(m43f); n != 1 {
		t.Fatalf("release of %s removed %d", m43f, n)
	}
	if got := nextMessage(); got != "-" {
		t.Errorf("release of 43 that (43, 0), admitted before it, never waited for published %q", got)
	}
}

// The barrier on a Ring of two shards: a release is announced on its own
// shard only, and the store listens to one, so a Drain may wake by its
// timer alone; the suite passes regardless.
func TestRingConformance(t *testing.T) {
	s1, s2 := redistest.Start(t), redistest.Start(t)
	storetest.Run(t, func(t *testing.T) fencestore.Store {
		ring := redis.NewRing(&redis.RingOptions{
			Addrs:                 map[string]string{"s1": s1.Addr(), "s2": s2.Addr()},
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
		})
		_, prefix := newStore(t, s1, redisstore.Options{}) // a prefix of its own
		s := redisstore.New(ring, redisstore.Options{KeyPrefix: prefix, DrainPoll: 50 * time.Millisecond})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// On a single server any mark key has an in-flight key; on a cluster a
// mark key with a '}' but no hash tag has none in its slot, and its
// admissions with the barrier fail closed, naming the reason, before
// anything is written.
func TestBarrierBraces(t *testing.T) {
	srv := redistest.Start(t)
	single, _ := newStore(t, srv, redisstore.Options{})
	cluster := redistest.StartCluster(t, 3)
	cs, cc, prefix := newClusterStore(t, cluster, redisstore.Options{}, nil)
	ctx := t.Context()
	for _, res := range []string{"a{}b", "x}y"} {
		a := fencestore.Admission{Resource: res, Token: 5, Flight: time.Minute}
		if d, err := single.Admit(ctx, a); err != nil || !d.Admitted || !d.Flight.Registered() {
			t.Errorf("single server: Admit(%q) = %+v, %v; want admitted in flight", res, d, err)
		} else {
			single.Release(d.Flight)
		}
		d, err := cs.Admit(ctx, a)
		if !errors.Is(err, fencestore.ErrUnavailable) || !strings.Contains(err.Error(), "hash tag") {
			t.Errorf("cluster: Admit(%q) = %+v, %v; want ErrUnavailable naming the hash tag", res, d, err)
		}
		if n, err := cc.Exists(ctx, prefix+res).Result(); err != nil || n != 0 {
			t.Errorf("cluster: Admit(%q) wrote its mark (EXISTS %d, %v)", res, n, err)
		}
		// Without the barrier nothing changes.
		a.Flight = 0
		if d, err := cs.Admit(ctx, a); err != nil || !d.Admitted {
			t.Errorf("cluster: Admit(%q) without the barrier = %+v, %v", res, d, err)
		}
	}
	// A hash tag of the resource's own: the in-flight key is named after
	// it, outside the prefix.
	f := flyThrough(t, cs, fencestore.Admission{Resource: "orders/{42}", Token: 1, Flight: time.Minute})
	if want := "{42}:inflight:" + prefix + "orders/{42}"; f.Key != want {
		t.Errorf("in-flight key %q, want %q", f.Key, want)
	}
	if n, err := cc.ZCard(ctx, f.Key).Result(); err != nil || n != 1 {
		t.Errorf("ZCARD %s = %d, %v", f.Key, n, err)
	}
	cs.Release(f)
	redistest.Poll(t, 5*time.Second, "the release", func() error {
		return gone(cc.Exists(ctx, f.Key).Result())
	})
}

// gone is nil when EXISTS answered 0.
func gone(n int64, err error) error {
	if err != nil {
		return err
	}
	if n != 0 {
		return errors.New("still there")
	}
	return nil
}

// Close stops a Drain that waits: it returns an error wrapping
// ErrUnavailable, at once rather than at its next look.
func TestDrainStoreClosed(t *testing.T) {
	srv := redistest.Start(t)
	a, b := replicas(t, srv, redisstore.Options{DrainPoll: 5 * time.Second})
	flyThrough(t, a, fencestore.Admission{Resource: "r", Token: 1, Flight: time.Minute})
	newer := flyThrough(t, b, fencestore.Admission{Resource: "r", Token: 2, Flight: time.Minute})
	ch := make(chan error, 1)
	go func() {
		_, err := b.Drain(context.Background(), newer)
		ch <- err
	}()
	time.Sleep(200 * time.Millisecond)
	_ = b.Close()
	select {
	case err := <-ch:
		if !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("Drain on a closed store = %v, want ErrUnavailable", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Drain still waiting after Close")
	}
}

// Admissions of one script run on one resource: each finds the ones before
// it in flight (those ordered before it), flags them as waited for, and the
// key keeps a TTL for the longest flight entered, though only the run's
// first admission on the key is told by PEXPIRE NX that the key is new.
func TestScriptOneRunOneKey(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	const key, fkey = "res", "{res}:inflight"
	keys := []string{key, fkey, key, fkey, key, fkey}
	args := []any{
		"41", "ge", "", "60000 a", "",
		"42", "ge", "", "7200000 b", "",
		"43", "ge", "", "60000 c", "",
	}
	r, err := c.Eval(ctx, redisstore.AdmitSource, keys, args...).Slice()
	if err != nil || len(r) != 21 {
		t.Fatalf("admit: %v, %v", r, err)
	}
	m41, m42, m43 := r[2].(string), r[9].(string), r[16].(string)
	for i, want := range []struct {
		older  int64
		olders string
	}{{0, ""}, {1, m41}, {1, m41 + " " + m42}} {
		if r[7*i] != int64(1) || r[7*i+3] != want.older || r[7*i+4] != want.olders {
			t.Errorf("admission %d: %v; want admitted, older %d, olders %q", i, r[7*i:7*i+7], want.older, want.olders)
		}
	}
	flags, err := c.ZRangeByLex(ctx, fkey, &redis.ZRangeBy{Min: "[~", Max: "+"}).Result()
	if err != nil || !slices.Equal(flags, []string{"~" + m41, "~" + m42}) {
		t.Errorf("flags %q, %v; want 41's and 42's, which later admissions found in flight", flags, err)
	}
	const gc = 48 * time.Hour // flight.lua's GC
	if ttl, err := c.PTTL(ctx, fkey).Result(); err != nil || ttl < 2*time.Hour+gc {
		t.Errorf("PTTL %s = %v, %v; want at least the longest flight (2h) and GC", fkey, ttl, err)
	}
	// The flagged entries' releases are announced; 43's, unflagged, not.
	ps := c.Subscribe(ctx, "ch")
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{m43, m42, m41} {
		if n, err := c.Eval(ctx, redisstore.ReleaseSource, []string{fkey}, m, "ch").Int64(); err != nil || n != 1 {
			t.Fatalf("release of %s: %d, %v", m, n, err)
		}
	}
	for _, want := range []string{m42, m41} {
		m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if msg, ok := m.(*redis.Message); err != nil || !ok || msg.Payload != want {
			t.Fatalf("announcement %v, %v; want %q", m, err, want)
		}
	}
	if n, err := c.Exists(ctx, fkey).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v; want it gone with its entries and their flags", fkey, n, err)
	}
}
