package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

var prefixes atomic.Uint64

// freshPrefix returns a key prefix no other store of the test binary uses.
func freshPrefix() string { return fmt.Sprintf("fence-%d:", prefixes.Add(1)) }

func open(t *testing.T, c *etcdtest.Cluster, prefix string) *etcdstore.Store {
	t.Helper()
	return etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: prefix, DrainPoll: 5 * time.Second})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T) fencestore.Store { return open(t, c, freshPrefix()) })
}

// An empty prefix: the identity record moves to "\x00", and the marks are
// every key from "\x01" on.
func TestConformanceNoPrefix(t *testing.T) {
	c := etcdtest.Start(t)
	storetest.RunKeeper(t,
		func(t *testing.T) storetest.KeeperStore { return open(t, c, "") },
		func(t *testing.T, _ storetest.KeeperStore) { deleteAll(t, c, "") })
}

func TestKeeperConformance(t *testing.T) {
	c := etcdtest.Start(t)
	var prefix string
	storetest.RunKeeper(t,
		func(t *testing.T) storetest.KeeperStore { prefix = freshPrefix(); return open(t, c, prefix) },
		// lose: every key under the prefix, as an emptied cluster (or a
		// restore from an older backup) would have it.
		func(t *testing.T, _ storetest.KeeperStore) { deleteAll(t, c, prefix) })
}

func deleteAll(t *testing.T, c *etcdtest.Cluster, prefix string) {
	t.Helper()
	cl := c.Client(t)
	var err error
	if prefix == "" {
		_, err = cl.Delete(ctxT(t), "\x00", clientv3.WithFromKey())
	} else {
		_, err = cl.Delete(ctxT(t), prefix, clientv3.WithPrefix())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// The stored form: 20 digits, and ':' and 20 digits with a sequence; the
// identity record under the prefix itself; nothing else under the prefix
// but in-flight keys, which List and HasMarks do not show.
func TestLayout(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, "fence:")
	defer s.Close()
	cl := c.Client(t)
	ctx := ctxT(t)
	id, err := s.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	mustAdmit(t, s, fencestore.Admission{Resource: "orders/42", Token: 41})
	mustAdmit(t, s, fencestore.Admission{Resource: "orders/7", Token: 18446744073709551615, Sequence: 7, HasSequence: true})
	d := mustAdmit(t, s, fencestore.Admission{Resource: "orders/42", Token: 42, Flight: time.Minute})
	defer s.Release(d.Flight)

	resp, err := cl.Get(ctx, "fence:", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var inflight []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); len(k) > len("fence:\x00") && k[len("fence:")] == 0 {
			inflight = append(inflight, k)
			if kv.Lease == 0 {
				t.Errorf("in-flight key %q has no lease", k)
			}
			continue
		}
		got[string(kv.Key)] = string(kv.Value)
	}
	want := map[string]string{
		"fence:":          id,
		"fence:orders/42": "00000000000000000042",
		"fence:orders/7":  "18446744073709551615:00000000000000000007",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys under the prefix:\n got %q\nwant %q", got, want)
	}
	wantFlight := "fence:\x00inflight/0000000009orders/4200000000000000000042:--------------------/"
	if len(inflight) != 1 || len(inflight[0]) != len(wantFlight)+33 || inflight[0][:len(wantFlight)] != wantFlight {
		t.Errorf("in-flight keys %q, want one beginning %q", inflight, wantFlight)
	}
	page, next, err := s.List(ctx, "", "", 10)
	if err != nil || next != "" || len(page) != 2 || page[0].Resource != "orders/42" || page[1].Resource != "orders/7" {
		t.Errorf("List = %+v, %q, %v; want the two marks only", page, next, err)
	}
}

func mustAdmit(t *testing.T, s fencestore.Store, a fencestore.Admission) fencestore.Decision {
	t.Helper()
	d, err := s.Admit(ctxT(t), a)
	if err != nil {
		t.Fatalf("Admit(%+v): %v", a, err)
	}
	if !d.Admitted {
		t.Fatalf("Admit(%+v) refused: %+v", a, d)
	}
	return d
}

// A value under a mark's key that is not a mark fails its admissions,
// closed; an admission writes over it only when the value sorts below its
// own mark (so forward, by the value's leading digits), and Raise never
// does; Reset replaces it.
func TestCorruptMark(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, "fence:")
	defer s.Close()
	cl := c.Client(t)
	ctx := ctxT(t)
	put := func(v string) {
		t.Helper()
		if _, err := cl.Put(ctx, "fence:bad", v); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() string {
		t.Helper()
		resp, err := cl.Get(ctx, "fence:bad")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("Get: %v", err)
		}
		return string(resp.Kvs[0].Value)
	}
	for _, bad := range []string{"", "42", "0", " 42", "-1", "00000000000000000042:", "00000000000000000042:7",
		"18446744073709551616", "0000000000000000004x", "000000000000000000042", "0000000000000000000"} {
		for _, a := range []fencestore.Admission{
			{Resource: "bad", Token: 50},
			{Resource: "bad", Token: 50, Compare: fencestore.Greater},
			{Resource: "bad", Token: 42, Sequence: 1, HasSequence: true},
			{Resource: "bad", Token: 1 << 63},
			{Resource: "bad", Token: 50, Floor: fencestore.Mark{Token: 60}, HasFloor: true},
			{Resource: "bad", Token: 50, Flight: time.Minute},
		} {
			put(bad)
			d, err := s.Admit(ctx, a)
			if !errors.Is(err, fencestore.ErrUnavailable) {
				t.Errorf("value %q: Admit(%+v) = %+v, %v; want an error wrapping ErrUnavailable", bad, a, d, err)
			}
			if v := stored(); v != bad && (v <= bad || len(bad) < 19 || bad[0] < '0') {
				t.Errorf("value %q: Admit(%+v) wrote %q", bad, a, v)
			}
		}
		put(bad)
		if _, _, err := s.Mark(ctx, "bad"); !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("value %q: Mark = %v", bad, err)
		}
		if _, _, _, err := s.Raise(ctx, "bad", fencestore.Mark{Token: 99}); !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("value %q: Raise = %v", bad, err)
		}
		if v := stored(); v != bad {
			t.Errorf("value %q: Raise wrote %q", bad, v)
		}
	}
	if _, had, err := s.Reset(ctx, "bad", &fencestore.Mark{Token: 3}); err != nil || !had {
		t.Fatalf("Reset over a corrupt value = %v, %v", had, err)
	}
	if d := mustAdmit(t, s, fencestore.Admission{Resource: "bad", Token: 4}); d.Mark != 4 {
		t.Fatalf("after Reset: %+v", d)
	}
}

// Names the store keeps for itself are refused, closed.
func TestReservedNames(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, "fence:")
	defer s.Close()
	for _, name := range []string{"", "\x00", "\x00inflight/x"} {
		if _, err := s.Admit(ctxT(t), fencestore.Admission{Resource: name, Token: 1}); !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("Admit(%q) = %v, want unavailable", name, err)
		}
	}
}

// A dead cluster: every call fails within its context, wrapping
// ErrUnavailable (and the context's error when it lasted to the
// deadline: the first one may meet the dying connection, EOF or reset,
// before it).
func TestUnavailable(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, "fence:")
	defer s.Close()
	mustAdmit(t, s, fencestore.Admission{Resource: "r", Token: 1})
	c.Members[0].Kill()
	for _, flight := range []time.Duration{0, time.Minute} {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		start := time.Now()
		_, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 2, Flight: flight})
		early := ctx.Err() == nil
		cancel()
		if !errors.Is(err, fencestore.ErrUnavailable) || (!early && !errors.Is(err, context.DeadlineExceeded)) {
			t.Errorf("Admit on a dead cluster (flight %v) = %v, want ErrUnavailable, and DeadlineExceeded past the deadline", flight, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Admit on a dead cluster took %v past a 300ms deadline", d)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := s.Ping(ctx); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("Ping on a dead cluster = %v", err)
	}
	c.Members[0].Restart(t)
	etcdtest.Poll(t, 10*time.Second, "admissions again", func() error {
		_, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "r", Token: 3})
		return err
	})
	if m, _, err := s.Get(ctxT(t), "r"); err != nil || m.Token != 3 {
		t.Fatalf("after the restart: %+v, %v", m, err)
	}
}

// Latency of one admission on a single member, serially (logged; the
// benchmarks have the figures with allocations).
func TestAdmitLatency(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, "fence:")
	defer s.Close()
	for _, flight := range []time.Duration{0, 30 * time.Second} {
		const n = 300
		lat := make([]time.Duration, 0, n)
		for i := range n {
			start := time.Now()
			d := mustAdmit(t, s, fencestore.Admission{Resource: "lat", Token: uint64(1000*int(flight/time.Second) + i + 1), Flight: flight})
			lat = append(lat, time.Since(start))
			s.Release(d.Flight)
		}
		t.Logf("flight %v: %s", flight, quantiles(lat))
	}
}
