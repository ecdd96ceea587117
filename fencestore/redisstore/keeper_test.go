package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// flushAll empties the servers at addrs (FLUSHALL), as an operator's flush
// or a restart without persistence would.
func flushAll(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		if _, err := redistest.Do(a, nil, "FLUSHALL"); err != nil {
			t.Fatalf("FLUSHALL %s: %v", a, err)
		}
	}
}

// scanAll returns the keys of the server at addr that match pattern.
func scanAll(t *testing.T, addr, pattern string) []string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var keys []string
	iter := c.Scan(t.Context(), 0, pattern, 1000).Iterator()
	for iter.Next(t.Context()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s: %v", addr, err)
	}
	return keys
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The operator's side on one server, batched and not, and with the empty
// key prefix, whose identity record is the empty key.
func TestKeeperConformance(t *testing.T) {
	srv := redistest.Start(t)
	lose := func(t *testing.T, _ storetest.KeeperStore) { flushAll(t, srv.Addr()) }
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.RunKeeper(t, func(t *testing.T) storetest.KeeperStore {
				s, _ := newStore(t, srv, tc.opts)
				return s
			}, lose)
		})
	}
	t.Run("empty prefix", func(t *testing.T) {
		bare := redistest.Start(t)
		storetest.RunKeeper(t, func(t *testing.T) storetest.KeeperStore {
			flushAll(t, bare.Addr())
			s := redisstore.New(redis.NewClient(bare.Options()), redisstore.Options{})
			t.Cleanup(func() { _ = s.Close() })
			return s
		}, func(t *testing.T, _ storetest.KeeperStore) { flushAll(t, bare.Addr()) })
	})
}

// With WAIT: the flush on the primary reaches the replica too.
func TestKeeperConformanceMinReplicas(t *testing.T) {
	primary, _ := startReplicated(t)
	storetest.RunKeeper(t, func(t *testing.T) storetest.KeeperStore {
		s, _ := newStore(t, primary, redisstore.Options{MinReplicas: 1, WaitTimeout: 2 * time.Second})
		return s
	}, func(t *testing.T, _ storetest.KeeperStore) { flushAll(t, primary.Addr()) })
}

// On a Ring every shard holds a copy of the identity record, and each
// admission checks its own shard's in its script run.
func TestRingKeeperConformance(t *testing.T) {
	s1, s2 := redistest.Start(t), redistest.Start(t)
	storetest.RunKeeper(t, func(t *testing.T) storetest.KeeperStore {
		return newRingStore(t, s1, s2)
	}, func(t *testing.T, _ storetest.KeeperStore) { flushAll(t, s1.Addr(), s2.Addr()) })
}

func newRingStore(t *testing.T, s1, s2 *redistest.Server) *redisstore.Store {
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"s1": s1.Addr(), "s2": s2.Addr()},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	s := redisstore.New(ring, redisstore.Options{KeyPrefix: fmt.Sprintf("fence:%d:", prefixes.Add(1)), DrainPoll: 50 * time.Millisecond})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A Ring whose shards disagree about the identity (one was flushed) has
// none to give, and Init without force refuses to paper over it.
func TestRingIdentityDisagrees(t *testing.T) {
	s1, s2 := redistest.Start(t), redistest.Start(t)
	s := newRingStore(t, s1, s2)
	ctx := opCtx(t)
	id, err := s.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*redistest.Server{s1, s2} {
		if got, err := redistest.Do(srv.Addr(), nil, "KEYS", "*"); err != nil || fmt.Sprint(got) == "[]" {
			t.Fatalf("shard %s: %v, %v; want its copy of the identity", srv.Addr(), got, err)
		}
	}
	s.Expect(id)
	flushAll(t, s2.Addr())
	if _, err := s.Identity(ctx); !errors.Is(err, fencestore.ErrUnavailable) || !strings.Contains(err.Error(), "shards hold different ones") {
		t.Fatalf("Identity with one shard flushed = %v", err)
	}
	if _, err := s.Init(ctx, false); !errors.Is(err, fencestore.ErrIdentityExists) {
		t.Fatalf("Init without force = %v, want ErrIdentityExists", err)
	}
	var lost *fencestore.LostError
	if err := s.Ping(ctx); !errors.As(err, &lost) || lost.Found != "" {
		t.Fatalf("Ping = %v, want a *LostError naming none", err)
	}
	// Admissions on the flushed shard are refused, on the other admitted.
	var refused, admitted int
	for i := range 40 {
		_, err := s.Admit(ctx, fencestore.Admission{Resource: fmt.Sprintf("r/%d", i), Token: 1})
		switch {
		case errors.As(err, &lost):
			refused++
		case err == nil:
			admitted++
		default:
			t.Fatal(err)
		}
	}
	if refused == 0 || admitted == 0 {
		t.Fatalf("%d refused, %d admitted; want both on a ring with one flushed shard", refused, admitted)
	}
	renewed, err := s.Init(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Identity(ctx); err != nil || got != renewed {
		t.Fatalf("Identity after Init --force = %q, %v", got, err)
	}
}

// Expect on one server: a deleted or replaced record, FLUSHALL and a
// restart without persistence each fail the next admission with a
// *LostError, writing nothing; putting the record back ends it.
func TestExpectDetectsLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			s, prefix := newStore(t, srv, tc.opts)
			c := srv.Client(t)
			ctx := opCtx(t)
			id, err := s.Init(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, prefix).Result(); err != nil || v != id {
				t.Fatalf("GET %s = %q, %v; want the identity %q", prefix, v, err, id)
			}
			s.Expect(id)
			token := uint64(0)
			for _, step := range []struct {
				name  string
				lose  func()
				found string
			}{
				{"DEL", func() { c.Del(ctx, prefix) }, ""},
				{"another", func() { c.Set(ctx, prefix, "another", 0) }, "another"},
				{"FLUSHALL", func() { flushAll(t, srv.Addr()) }, ""},
				{"restart", func() { srv.Restart(t) }, ""},
			} {
				if err := c.Set(ctx, prefix, id, 0).Err(); err != nil {
					t.Fatal(err)
				}
				// The record put back by hand over a store that lost its
				// generation is a new history (a flushed store otherwise
				// fails as gone back in time).
				s.Expect("")
				s.Expect(id)
				token++
				if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: token}); err != nil || !d.Admitted {
					t.Fatalf("%s: before: %+v, %v", step.name, d, err)
				}
				step.lose()
				var lost *fencestore.LostError
				// After a restart the first command may meet the old
				// connection, closed.
				redistest.Poll(t, 5*time.Second, step.name+": a *LostError", func() error {
					_, err := s.Admit(ctx, fencestore.Admission{Resource: "new/" + step.name, Token: 1})
					if !errors.As(err, &lost) {
						return fmt.Errorf("Admit = %v", err)
					}
					return nil
				})
				if lost.Want != id || lost.Found != step.found || !errors.Is(lost, fencestore.ErrStoreLost) || !errors.Is(lost, fencestore.ErrUnavailable) {
					t.Fatalf("%s: %#v", step.name, lost)
				}
				if n, err := c.Exists(ctx, prefix+"new/"+step.name).Result(); err != nil || n != 0 {
					t.Fatalf("%s: the refused admission wrote its mark (%d, %v)", step.name, n, err)
				}
				if err := s.Ping(ctx); !errors.As(err, &lost) {
					t.Fatalf("%s: Ping = %v, want a *LostError", step.name, err)
				}
			}
			// A key of another type at the record's name: refused, but
			// not as a loss the store can name.
			redistest.Poll(t, 5*time.Second, "DEL after the restart", func() error { return c.Del(ctx, prefix).Err() })
			if err := c.HSet(ctx, prefix, "f", "1").Err(); err != nil {
				t.Fatal(err)
			}
			_, err = s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 100})
			var lost *fencestore.LostError
			if !errors.Is(err, fencestore.ErrUnavailable) || errors.As(err, &lost) || !strings.Contains(err.Error(), "identity key") {
				t.Fatalf("Admit with a hash as the identity record = %v", err)
			}
			if _, err := s.Identity(ctx); !errors.Is(err, fencestore.ErrUnavailable) {
				t.Fatalf("Identity of a hash = %v", err)
			}
			// Expect("") turns the check off.
			s.Expect("")
			if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 100}); err != nil || !d.Admitted {
				t.Fatalf("after Expect(\"\"): %+v, %v", d, err)
			}
		})
	}
}

// cmdstats returns the calls of each command in INFO commandstats at addr.
func cmdstats(t *testing.T, addr string) map[string]int {
	t.Helper()
	m, err := redistest.Info(addr, nil, "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		out[name], _ = strconv.Atoi(calls)
	}
	return out
}

// A deleted mark is healed against the floor by the admission's own script
// run: one EVALSHA, in which the identity and the mark are read (two GETs)
// and the floor written back (one SET); nothing else reaches the server.
func TestFloorHealsInOneRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			s, prefix := newStore(t, srv, tc.opts)
			ctx := opCtx(t)
			id, err := s.Init(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			s.Expect(id)
			if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 10}); err != nil || !d.Admitted {
				t.Fatalf("%+v, %v", d, err)
			}
			if _, err := redistest.Do(srv.Addr(), nil, "DEL", prefix+"r"); err != nil {
				t.Fatal(err)
			}
			if _, err := redistest.Do(srv.Addr(), nil, "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			floor := fencestore.Mark{Token: 10}
			d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Floor: floor, HasFloor: true})
			if err != nil || d.Admitted || !d.Regressed || d.Mark != 10 {
				t.Fatalf("5 against a deleted mark with floor 10: %+v, %v", d, err)
			}
			stats := cmdstats(t, srv.Addr())
			for _, ours := range []string{"config|resetstat", "hello", "info"} {
				delete(stats, ours)
			}
			// The generation: read with the identity (HMGET), advanced
			// by the write (HINCRBY), in the same run.
			want := map[string]int{"evalsha": 1, "get": 2, "set": 1, "hmget": 1, "hincrby": 1}
			if fmt.Sprint(stats) != fmt.Sprint(want) {
				t.Errorf("commands after the reset: %v, want %v", stats, want)
			}
			if v, err := redistest.Do(srv.Addr(), nil, "GET", prefix+"r"); err != nil || v != "10" {
				t.Errorf("GET = %v, %v; want the floor, 10", v, err)
			}
		})
	}
}

// The floor decides as fencestore.Admission.Decide does, over random marks,
// admissions and floors at the edges of the range: same decision, same
// mark reported, same mark stored.
func TestFloorMatchesDecide(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{})
	ctx := opCtx(t)
	rng := rand.New(rand.NewPCG(1, 2))
	values := []uint64{0, 1, 2, 7, 8, 1 << 53, 1<<53 + 1, 1<<64 - 2, 1<<64 - 1}
	mark := func() fencestore.Mark {
		m := fencestore.Mark{Token: values[rng.IntN(len(values))]}
		if rng.IntN(2) == 0 {
			m.Sequence, m.HasSequence = values[rng.IntN(len(values))], true
		}
		return m
	}
	for i := range 600 {
		res := fmt.Sprintf("d/%d", i)
		stored, has := mark(), rng.IntN(4) != 0
		am := mark()
		a := fencestore.Admission{Resource: res, Token: am.Token, Sequence: am.Sequence, HasSequence: am.HasSequence,
			Compare: fencestore.Compare(rng.IntN(2))}
		if rng.IntN(5) != 0 {
			a.Floor, a.HasFloor = mark(), true
		}
		if has {
			if _, _, err := s.Reset(ctx, res, &stored); err != nil {
				t.Fatal(err)
			}
		}
		want, next, _ := a.Decide(stored, has)
		d, err := s.Admit(ctx, a)
		if err != nil {
			t.Fatalf("Admit(%+v) over %+v (%v): %v", a, stored, has, err)
		}
		if d != want {
			t.Fatalf("Admit(%+v) over %+v (%v) = %+v, Decide says %+v", a, stored, has, d, want)
		}
		if got, ok, err := s.Get(ctx, res); err != nil || !ok || got != next {
			t.Fatalf("Admit(%+v) over %+v (%v): stored %+v, %v, %v; Decide says %+v", a, stored, has, got, ok, err, next)
		}
	}
}

// List escapes the glob characters of the key prefix and of its prefix:
// SCAN's MATCH takes them literally.
func TestListEscapesGlob(t *testing.T) {
	srv := redistest.Start(t)
	ctx := opCtx(t)
	n := prefixes.Add(1)
	// Unescaped, "glob<n>[12]:*" would match the second store's keys.
	s := redisstore.New(redis.NewClient(srv.Options()), redisstore.Options{KeyPrefix: fmt.Sprintf("glob%d[12]:", n)})
	t.Cleanup(func() { _ = s.Close() })
	other := redisstore.New(redis.NewClient(srv.Options()), redisstore.Options{KeyPrefix: fmt.Sprintf("glob%d1:", n)})
	t.Cleanup(func() { _ = other.Close() })
	if _, err := other.Admit(ctx, fencestore.Admission{Resource: "a*x", Token: 1}); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasMarks(ctx); err != nil || has {
		t.Fatalf("HasMarks with marks under a prefix the unescaped pattern matches = %v, %v", has, err)
	}
	names := []string{"a*", "a*b", "a?", "ab", "a[b]", "a[b]c", "ac", `a\`, `a\b`, "a]", "b"}
	for i, name := range names {
		if _, err := s.Admit(ctx, fencestore.Admission{Resource: name, Token: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Init(ctx, false); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string][]string{
		"a*":   {"a*", "a*b"},
		"a?":   {"a?"},
		"a[b]": {"a[b]", "a[b]c"},
		"a[":   {"a[b]", "a[b]c"},
		"a]":   {"a]"},
		`a\`:   {`a\`, `a\b`},
		"a":    {"a*", "a*b", "a?", "ab", "a[b]", "a[b]c", "ac", `a\`, `a\b`, "a]"},
		"":     names,
		"*":    nil,
		"?":    nil,
	} {
		for _, limit := range []int{0, 1, 3} {
			got := listAll(t, s, prefix, limit)
			slices.Sort(got)
			w := slices.Clone(want)
			slices.Sort(w)
			if !slices.Equal(got, w) {
				t.Errorf("List(%q, limit %d) = %q, want %q", prefix, limit, got, w)
			}
		}
	}
}

// listAll walks List to its end with pages of limit and returns the
// resources, failing on a page too long or a resource listed twice.
func listAll(t *testing.T, s fencestore.Keeper, prefix string, limit int) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := s.List(opCtx(t), prefix, cursor, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, cursor, limit, err)
		}
		if limit > 0 && len(page) > limit {
			t.Fatalf("List(%q, limit %d): a page of %d", prefix, limit, len(page))
		}
		for _, e := range page {
			if seen[e.Resource] {
				t.Fatalf("List(%q, limit %d) listed %q twice", prefix, limit, e.Resource)
			}
			seen[e.Resource] = true
			out = append(out, e.Resource)
		}
		if next == "" {
			return out
		}
		if pages > 100000 {
			t.Fatal("List does not end")
		}
		cursor = next
	}
}

// Paging through many marks among many other keys: every mark once, pages
// never longer than asked (SCAN batches longer than a page are split), the
// identity record and in-flight keys never listed.
func TestListPaging(t *testing.T) {
	srv := redistest.Start(t)
	s, prefix := newStore(t, srv, redisstore.Options{})
	c := srv.Client(t)
	ctx := opCtx(t)
	pipe := c.Pipeline()
	want := map[string]string{}
	for i := range 600 {
		name := fmt.Sprintf("m/%d", i)
		want[name] = strconv.Itoa(i + 1)
		pipe.Set(ctx, prefix+name, i+1, 0)
		pipe.Set(ctx, fmt.Sprintf("unrelated:%d", i), 1, 0)
		pipe.Set(ctx, prefix+fmt.Sprintf("n/%d", i), 1, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// A hash-tagged resource's in-flight key is named after its tag,
	// outside the prefix; one left by an older version under the prefix
	// (a sorted set named <mark>:inflight) is no mark either.
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "m/{tagged}", Token: 3, Flight: time.Minute}); err != nil {
		t.Fatal(err)
	}
	want["m/{tagged}"] = "3"
	if n, err := c.Exists(ctx, "{tagged}:inflight:"+prefix+"m/{tagged}").Result(); err != nil || n != 1 {
		t.Fatalf("no in-flight key named after the tag (%d, %v)", n, err)
	}
	if err := c.ZAdd(ctx, prefix+"m/{tagged}:inflight", redis.Z{Member: "x"}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 7, 100, 1000, 0} {
		for _, p := range []string{"m/", ""} {
			got := listAll(t, s, p, limit)
			if p == "" {
				if len(got) != 1201 {
					t.Errorf("List(\"\", limit %d): %d marks, want 1201", limit, len(got))
				}
				continue
			}
			if len(got) != len(want) {
				t.Errorf("List(m/, limit %d): %d marks, want %d", limit, len(got), len(want))
			}
			for _, name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("List(m/, limit %d) listed %q", limit, name)
				}
			}
		}
	}
	page, _, err := s.List(ctx, "m/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page {
		if v := string(e.Mark.AppendValue(nil)); v != want[e.Resource] {
			t.Errorf("%s: %s, want %s", e.Resource, v, want[e.Resource])
		}
	}
	if _, _, err := s.List(ctx, "m/", "not a cursor", 5); err == nil {
		t.Error("List with a made-up cursor: no error")
	}
}

// What is not a mark: a corrupt value fails Get, List and Raise with an
// error naming the key, and Reset repairs it (a key of another type too);
// HasMarks passes over the identity record and in-flight keys; an empty
// resource name, which would be the identity record, is refused.
func TestKeeperNotMarks(t *testing.T) {
	srv := redistest.Start(t)
	s, prefix := newStore(t, srv, redisstore.Options{})
	c := srv.Client(t)
	ctx := opCtx(t)
	id, err := s.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	// A resource that has only an in-flight key left is no mark.
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "h/{1}", Token: 1, Flight: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, had, err := s.Reset(ctx, "h/{1}", nil); err != nil || !had {
		t.Fatalf("Reset = %v, %v", had, err)
	}
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "plain", Token: 1, Flight: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Reset(ctx, "plain", nil); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasMarks(ctx); err != nil || has {
		t.Fatalf("HasMarks with the identity and in-flight keys alone = %v, %v", has, err)
	}
	// A resource named as an in-flight key, holding a mark, is one.
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "x/{1}:inflight", Token: 4}); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasMarks(ctx); err != nil || !has {
		t.Fatalf("HasMarks with a mark named as an in-flight key = %v, %v", has, err)
	}
	if got := listAll(t, s, "", 0); !slices.Equal(got, []string{"x/{1}:inflight"}) {
		t.Fatalf("List = %q", got)
	}

	if err := c.Set(ctx, prefix+"bad", "42:07", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "bad"); !errors.Is(err, fencestore.ErrUnavailable) || !strings.Contains(err.Error(), prefix+"bad") {
		t.Errorf("Get of a corrupt mark = %v", err)
	}
	if _, _, err := s.List(ctx, "", "", 0); !errors.Is(err, fencestore.ErrUnavailable) || !strings.Contains(err.Error(), prefix+"bad") {
		t.Errorf("List over a corrupt mark = %v", err)
	}
	if _, _, _, err := s.Raise(ctx, "bad", fencestore.Mark{Token: 50}); !errors.Is(err, fencestore.ErrUnavailable) || !strings.Contains(err.Error(), prefix+"bad") {
		t.Errorf("Raise over a corrupt mark = %v", err)
	}
	if v, _ := c.Get(ctx, prefix+"bad").Result(); v != "42:07" {
		t.Errorf("Raise changed a corrupt mark to %q", v)
	}
	if old, had, err := s.Reset(ctx, "bad", &fencestore.Mark{Token: 42, Sequence: 7, HasSequence: true}); err != nil || !had || old != (fencestore.Mark{}) {
		t.Errorf("Reset of a corrupt mark = %+v, %v, %v", old, had, err)
	}
	if m, ok, err := s.Get(ctx, "bad"); err != nil || !ok || m != (fencestore.Mark{Token: 42, Sequence: 7, HasSequence: true}) {
		t.Errorf("Get after the repair = %+v, %v, %v", m, ok, err)
	}
	if err := c.HSet(ctx, prefix+"hash", "f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "hash"); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("Get of a hash = %v", err)
	}
	if _, _, err := s.List(ctx, "ha", "", 0); !errors.Is(err, fencestore.ErrUnavailable) || !strings.Contains(err.Error(), prefix+"hash") {
		t.Errorf("List over a hash = %v", err)
	}
	if old, had, err := s.Reset(ctx, "hash", nil); err != nil || !had || old != (fencestore.Mark{}) {
		t.Errorf("Reset (delete) of a hash = %+v, %v, %v", old, had, err)
	}
	if n, _ := c.Exists(ctx, prefix+"hash").Result(); n != 0 {
		t.Error("the hash is still there")
	}

	if _, _, err := s.Get(ctx, ""); err == nil {
		t.Error("Get(\"\"): no error")
	}
	if _, _, _, err := s.Raise(ctx, "", fencestore.Mark{Token: 1}); err == nil {
		t.Error("Raise(\"\"): no error")
	}
	if _, _, err := s.Reset(ctx, "", nil); err == nil {
		t.Error("Reset(\"\"): no error")
	}
	if _, err := s.Admit(ctx, fencestore.Admission{Token: 1}); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("Admit(\"\") = %v", err)
	}
	if got, err := s.Identity(ctx); err != nil || got != id {
		t.Errorf("the identity record became %q, %v", got, err)
	}
}

// On a Cluster every slot holds a copy of the identity record, and each
// admission checks the copy in its mark's slot, in its script run
// (slots.go): a flush is noticed by the next admission, with no reading in
// between.
func TestClusterKeeper(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}, {"tagged prefix", redisstore.Options{KeyPrefix: "{fence-tagged}:"}}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.RunKeeper(t, func(t *testing.T) storetest.KeeperStore {
				s, _, _ := newClusterStore(t, cluster, tc.opts, nil)
				return s
			}, func(t *testing.T, _ storetest.KeeperStore) {
				flushAll(t, cluster.Addrs()...)
			})
		})
	}

	t.Run("paging", func(t *testing.T) {
		s, cc, prefix := newClusterStore(t, cluster, redisstore.Options{}, nil)
		ctx := opCtx(t)
		masters := map[string]bool{}
		for i := range 300 {
			name := fmt.Sprintf("m/%d", i)
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: name, Token: uint64(i + 1)}); err != nil {
				t.Fatal(err)
			}
			node, err := cc.MasterForKey(ctx, prefix+name)
			if err != nil {
				t.Fatal(err)
			}
			masters[node.Options().Addr] = true
		}
		if _, err := s.Admit(ctx, fencestore.Admission{Resource: "other", Token: 1}); err != nil {
			t.Fatal(err)
		}
		if len(masters) != 3 {
			t.Fatalf("the marks are on %d masters, want 3", len(masters))
		}
		for _, limit := range []int{1, 7, 1000, 0} {
			if got := listAll(t, s, "m/", limit); len(got) != 300 {
				t.Errorf("List(m/, limit %d): %d marks, want 300", limit, len(got))
			}
		}
		if got := listAll(t, s, "", 7); len(got) != 301 {
			t.Errorf("List(\"\", limit 7): %d marks, want 301", len(got))
		}
	})

	t.Run("every slot", func(t *testing.T) {
		s, cc, prefix := newClusterStore(t, cluster, redisstore.Options{}, nil)
		ctx := opCtx(t)
		id, err := s.Init(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		s.Expect(id)

		// Every slot has its record, named as slots.go says, and Redis
		// puts each in the slot it is for.
		slots := map[int64]bool{}
		for _, addr := range cluster.Addrs() {
			keys := scanAll(t, addr, "{"+prefix+"*}:identity")
			pipe := cc.Pipeline()
			cmds := make([]*redis.IntCmd, len(keys))
			for i, k := range keys {
				cmds[i] = pipe.ClusterKeySlot(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			for i, c := range cmds {
				if slots[c.Val()] {
					t.Fatalf("two records in slot %d (%q)", c.Val(), keys[i])
				}
				slots[c.Val()] = true
			}
		}
		if len(slots) != 16384 {
			t.Fatalf("records in %d slots, want 16384", len(slots))
		}
		if got, err := s.Identity(ctx); got != id || err != nil {
			t.Fatalf("Identity = %q, %v", got, err)
		}

		// One resource on each master, admitted.
		res := map[string]string{} // master -> resource
		for i := 0; len(res) < 3; i++ {
			name := fmt.Sprintf("slot/%d", i)
			n, err := cc.MasterForKey(ctx, prefix+name)
			if err != nil {
				t.Fatal(err)
			}
			if res[n.Options().Addr] == "" {
				res[n.Options().Addr] = name
				if _, err := s.Admit(ctx, fencestore.Admission{Resource: name, Token: 10}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var flushed string
		for addr := range res {
			flushed = addr
			break
		}
		flushAll(t, flushed)

		// The very next admission on the emptied master fails with the
		// loss, token 5 after 10 included; the others' records are intact.
		var lost *fencestore.LostError
		for addr, name := range res {
			d, err := s.Admit(ctx, fencestore.Admission{Resource: name, Token: 5})
			switch {
			case addr == flushed && !errors.As(err, &lost):
				t.Fatalf("5 after 10 on the flushed master = %+v, %v; want a *LostError", d, err)
			case addr == flushed && (lost.Want != id || lost.Found != ""):
				t.Fatalf("%#v", lost)
			case addr != flushed && (err != nil || d.Admitted):
				t.Fatalf("5 after 10 on an intact master = %+v, %v; want refused", d, err)
			}
		}
		if err := s.Ping(ctx); !errors.As(err, &lost) {
			t.Fatalf("Ping = %v, want a *LostError", err)
		}
		if _, err := s.Identity(ctx); err == nil || !strings.Contains(err.Error(), "hold none") {
			t.Fatalf("Identity = %v, want the slots that hold none named", err)
		}
		if _, err := s.Init(ctx, false); err == nil {
			t.Fatal("Init without force on a half-emptied cluster succeeded")
		}
		forced, err := s.Init(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		s.Expect(forced)
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping after Init --force = %v", err)
		}
		if d, err := s.Admit(ctx, fencestore.Admission{Resource: res[flushed], Token: 6}); err != nil || !d.Admitted {
			t.Fatalf("after Init --force = %+v, %v", d, err)
		}
	})

	t.Run("prefix with a lone }", func(t *testing.T) {
		s, _, _ := newClusterStore(t, cluster, redisstore.Options{KeyPrefix: "fe}nce:"}, nil)
		if err := s.Layout(); err == nil || !strings.Contains(err.Error(), "fe}nce:") {
			t.Fatalf("Layout = %v, want an error naming the prefix", err)
		}
		if _, err := s.Init(opCtx(t), false); err == nil {
			t.Fatal("Init succeeded")
		}
	})
}

// The generation on one server, batched and not: a store
// set back (the generation hash written lower, as a restored RDB holds it)
// fails every admission with a rollback.
func TestGeneration(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			var prefix string
			storetest.RunGeneration(t, func(t *testing.T) storetest.KeeperStore {
				var s *redisstore.Store
				s, prefix = newStore(t, srv, tc.opts)
				return s
			}, func(t *testing.T, _ storetest.KeeperStore, to uint64) {
				if err := srv.Client(t).HSet(opCtx(t), "{"+prefix+"}:generation", "g", to).Err(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// Two deployments whose prefixes nest share one Redis, a Ring or a
// Cluster (whose records are per slot, or per shard): the inner one is
// refused (Nesting), whichever order they write their records in; one
// whose prefix merely shares a beginning with another's is not.
func TestNestedPrefixes(t *testing.T) {
	for _, topo := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redis.NewClient(redistest.Start(t).Options()) }},
		{"ring", func(t *testing.T) redis.UniversalClient {
			s1, s2 := redistest.Start(t), redistest.Start(t)
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s1": s1.Addr(), "s2": s2.Addr()}, MaxRetries: -1})
		}},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3).Client(t) }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			c := topo.client(t)
			t.Cleanup(func() { _ = c.Close() })
			ctx := opCtx(t)
			open := func(prefix string) *redisstore.Store {
				// Each store its own client: Close closes it.
				var cl redis.UniversalClient
				switch x := c.(type) {
				case *redis.Client:
					cl = redis.NewClient(x.Options())
				case *redis.Ring:
					cl = redis.NewRing(x.Options())
				case *redis.ClusterClient:
					cl = redis.NewClusterClient(x.Options())
				}
				s := redisstore.New(cl, redisstore.Options{KeyPrefix: prefix})
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			outer := open("fence:")
			if err := outer.Nesting(ctx); err != nil {
				t.Fatalf("outer before anything: %v", err)
			}
			if _, err := outer.Init(ctx, false); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				prefix string
				nested bool
			}{{"fence:billing:", true}, {"fence:b", true}, {"fence:{b}:", true}, {"fence2:", false}, {"fenc:", false}} {
				err := open(tc.prefix).Nesting(ctx)
				if got := errors.Is(err, redisstore.ErrNestedPrefix); got != tc.nested {
					t.Errorf("prefix %q beside fence: = %v, want nested %t", tc.prefix, err, tc.nested)
				}
			}
			// A lost record is an identity record too.
			if _, err := outer.MarkLost(ctx, "x"); err != nil {
				t.Fatal(err)
			}
			if err := open("fence:billing:").Nesting(ctx); !errors.Is(err, redisstore.ErrNestedPrefix) {
				t.Errorf("beside a lost record: %v", err)
			}
		})
	}
}
