package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

var prefixes atomic.Int64

// newStore returns a store on srv under a key prefix no other store of this
// test binary uses, closed when the test ends.
func newStore(t testing.TB, srv *redistest.Server, opts redisstore.Options) (*redisstore.Store, string) {
	t.Helper()
	return newStoreWith(t, srv.Options(), opts)
}

// newStoreWith is newStore on a client of opt.
func newStoreWith(t testing.TB, opt *redis.Options, opts redisstore.Options) (*redisstore.Store, string) {
	t.Helper()
	opts.KeyPrefix = fmt.Sprintf("fence:%d:", prefixes.Add(1))
	s := redisstore.New(redis.NewClient(opt), opts)
	t.Cleanup(func() { _ = s.Close() })
	return s, opts.KeyPrefix
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) fencestore.Store {
		s, _ := newStore(t, srv, redisstore.Options{})
		return s
	})
}

// The same suite with group commit off: one round trip per admission.
func TestConformanceUnbatched(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) fencestore.Store {
		s, _ := newStore(t, srv, redisstore.Options{MaxBatch: -1})
		return s
	})
}

// Group commit under load against real Redis: many concurrent admissions on
// few resources (so pipelines carry several admissions of one key), each
// decision exact, the final marks the greatest admitted tokens, and some
// callers giving up mid-flight without disturbing the others.
func TestBatchedConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{MaxBatch: 16, Pipelines: 2})
	const workers, per, resources = 32, 100, 3
	var greatest [resources]atomic.Uint64
	var admitted, refused, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				res := (w + i) % resources
				tok := uint64(i*workers + w + 1)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if i%17 == 0 { // a caller that gives up at once
					cancel()
				}
				d, err := s.Admit(ctx, fencestore.Admission{Resource: "r" + strconv.Itoa(res), Token: tok, Compare: fencestore.Greater})
				cancel()
				switch {
				case err != nil && i%17 == 0:
					gaveUp.Add(1)
				case err != nil:
					t.Errorf("Admit: %v", err)
					return
				case d.Admitted:
					admitted.Add(1)
					if d.Mark != tok {
						t.Errorf("admitted %d with mark %d", tok, d.Mark)
					}
					for {
						g := greatest[res].Load()
						if tok <= g || greatest[res].CompareAndSwap(g, tok) {
							break
						}
					}
				default:
					refused.Add(1)
					if d.Mark <= tok {
						t.Errorf("refused %d under '>' with mark %d", tok, d.Mark)
					}
				}
			}
		}()
	}
	wg.Wait()
	for res := range resources {
		m, ok, err := s.Mark(t.Context(), "r"+strconv.Itoa(res))
		if err != nil || !ok || m != greatest[res].Load() {
			t.Errorf("r%d: mark %d (%v, %v), greatest admitted %d", res, m, ok, err, greatest[res].Load())
		}
	}
	t.Logf("admitted %d, refused %d, gave up %d", admitted.Load(), refused.Load(), gaveUp.Load())
}

// Sequences under group commit: many callers share one token and send
// distinct sequences at once, so a pipeline (one script run) holds several
// of them for one key. Each decision is exact: an admitted sequence is the
// mark it reports, a refused one reports the same token with a greater
// sequence, and the last mark is the greatest sequence sent (nothing is
// above it, so it cannot be refused).
func TestBatchedSequences(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{MaxBatch: 16, Pipelines: 2}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			s, prefix := newStore(t, srv, tc.opts)
			const workers, per, token = 32, 50, uint64(1) << 60
			var next atomic.Uint64
			next.Store(1<<53 - 100) // across 2^53, where doubles lose the difference
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range per {
						seq := next.Add(1)
						a := fencestore.Admission{Resource: "r", Token: token, Sequence: seq, HasSequence: true}
						d, err := s.Admit(t.Context(), a)
						switch {
						case err != nil:
							t.Errorf("Admit(%+v): %v", a, err)
							return
						case d.Admitted:
							admitted.Add(1)
							if d != (fencestore.Decision{Admitted: true, Mark: token, Sequence: seq, HasSequence: true}) {
								t.Errorf("admitted %d with %+v", seq, d)
							}
						default:
							refused.Add(1)
							if !d.StaleSequence(a) || !d.HasSequence || d.Sequence <= seq {
								t.Errorf("refused %d with %+v", seq, d)
							}
						}
					}
				})
			}
			wg.Wait()
			want := strconv.FormatUint(token, 10) + ":" + strconv.FormatUint(next.Load(), 10)
			if got, err := srv.Client(t).Get(t.Context(), prefix+"r").Result(); err != nil || got != want {
				t.Errorf("GET = %q, %v; want %q, the greatest sequence sent", got, err, want)
			}
			t.Logf("admitted %d, refused %d", admitted.Load(), refused.Load())
		})
	}
}

// startReplicated starts a primary and one replica of it, and waits until the
// replica is in sync. The primary pings its replicas rarely, so that its
// replication offset moves only with writes.
func startReplicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	// No diskless-sync delay: Redis waits 5s by default for more replicas.
	primary = redistest.Start(t, "--repl-ping-replica-period", "3600", "--repl-diskless-sync-delay", "0")
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	pc, rc := primary.Client(t), replica.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := info(t, pc, "connected_slaves")
		r := info(t, rc, "master_link_status")
		if p == "1" && r == "up" {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not in sync: connected_slaves=%s master_link_status=%s", p, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// info returns one field of INFO replication.
func info(t testing.TB, c *redis.Client, field string) string {
	t.Helper()
	s, err := c.Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication: %v", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// setCalls is how many SETs the server has run, scripts' included.
func setCalls(t testing.TB, c *redis.Client) int {
	t.Helper()
	s, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_set:calls="); ok {
			n, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
			return n
		}
	}
	return 0
}

func TestConformanceMinReplicas(t *testing.T) {
	primary, _ := startReplicated(t)
	storetest.Run(t, func(t *testing.T) fencestore.Store {
		s, _ := newStore(t, primary, redisstore.Options{MinReplicas: 1, WaitTimeout: 2 * time.Second})
		return s
	})
}

// TestLayout checks the documented key layout: GET <prefix><resource> is the
// decimal mark, with no TTL.
func TestLayout(t *testing.T) {
	srv := redistest.Start(t)
	s, prefix := newStore(t, srv, redisstore.Options{})
	c := srv.Client(t)
	ctx := t.Context()
	for _, tc := range []struct {
		resource string
		token    uint64
		want     string
	}{
		{"orders/42", 9007199254740993, "9007199254740993"},
		{"max", 1<<64 - 1, "18446744073709551615"},
		{"zero", 0, "0"},
	} {
		if _, err := s.Admit(ctx, fencestore.Admission{Resource: tc.resource, Token: tc.token, Compare: fencestore.Greater}); err != nil {
			t.Fatal(err)
		}
		key := prefix + tc.resource
		if got, err := c.Get(ctx, key).Result(); err != nil || got != tc.want {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, tc.want)
		}
		if ttl, err := c.Do(ctx, "TTL", key).Int64(); err != nil || ttl != -1 {
			t.Errorf("TTL %s = %d, %v; want -1 (no expiry)", key, ttl, err)
		}
	}
	// An admission that changes nothing does not touch the key either.
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "max", Token: 1<<64 - 1, Compare: fencestore.AtLeast}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 3 {
		t.Errorf("DBSIZE = %d, %v; want 3 keys", n, err)
	}
}

// TestLayoutSequence checks where the sequence lives: in the mark's own key,
// after the token and a colon, so GET still begins with the token. A greater
// token without a sequence drops it; an equal one under >= leaves the pair
// and writes nothing. Batched and not, since each passes its arguments on its
// own path.
func TestLayoutSequence(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			s, prefix := newStore(t, srv, tc.opts)
			ctx := t.Context()
			key := prefix + "orders/42"
			for i, st := range []struct {
				a        fencestore.Admission
				admitted bool
				value    string
				writes   bool
			}{
				{fencestore.Admission{Token: 42, Sequence: 7, HasSequence: true}, true, "42:7", true},
				{fencestore.Admission{Token: 42, Compare: fencestore.AtLeast}, true, "42:7", false},
				{fencestore.Admission{Token: 42, Sequence: 7, HasSequence: true}, false, "42:7", false},
				{fencestore.Admission{Token: 43, Compare: fencestore.Greater}, true, "43", true},
				{fencestore.Admission{Token: 43, Sequence: 1<<64 - 1, HasSequence: true}, true, "43:18446744073709551615", true},
				{fencestore.Admission{Token: 1<<64 - 1, Sequence: 0, HasSequence: true}, true, "18446744073709551615:0", true},
			} {
				st.a.Resource = "orders/42"
				sets := setCalls(t, c)
				d, err := s.Admit(ctx, st.a)
				if err != nil || d.Admitted != st.admitted {
					t.Fatalf("step %d: Admit(%+v) = %+v, %v; want admitted %t", i, st.a, d, err, st.admitted)
				}
				if got := string(fencestore.Mark{Token: d.Mark, Sequence: d.Sequence, HasSequence: d.HasSequence}.AppendValue(nil)); got != st.value {
					t.Errorf("step %d: the decision's mark is %s, want %s", i, got, st.value)
				}
				if got, err := c.Get(ctx, key).Result(); err != nil || got != st.value {
					t.Errorf("step %d: GET %s = %q, %v; want %q", i, key, got, err, st.value)
				}
				if wrote := setCalls(t, c) != sets; wrote != st.writes {
					t.Errorf("step %d: wrote %t, want %t", i, wrote, st.writes)
				}
				// The operator's read is the token alone.
				if m, ok, err := s.Mark(ctx, "orders/42"); err != nil || !ok || m != d.Mark {
					t.Errorf("step %d: Mark = %d, %t, %v; want %d", i, m, ok, err, d.Mark)
				}
				if ttl, err := c.Do(ctx, "TTL", key).Int64(); err != nil || ttl != -1 {
					t.Errorf("TTL %s = %d, %v; want -1 (no expiry)", key, ttl, err)
				}
			}
		})
	}
}

// TestScriptSequences runs admit.lua directly on one call that mixes keys with
// and without sequences: exact past 2^53 (where two sequences are one
// double) and up to the greatest uint64, each key seeing the writes before
// it, and a corrupt "t:s" failing its own key only.
func TestScriptSequences(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	src := redisstore.AdmitSource
	for key, v := range map[string]string{"bad1": "42:", "bad2": "42:07", "bad3": "42:7:1", "pair": "5:7"} {
		if err := c.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const (
		p53  = "9007199254740992"
		p53a = "9007199254740993"
		max  = "18446744073709551615"
	)
	steps := []struct {
		key, token, mode, seq string
		flag                  int64
		mark                  string
	}{
		{"s", "7", "ge", p53, 1, "7:" + p53},
		{"s", "7", "gt", p53a, 1, "7:" + p53a}, // as doubles, equal to 2^53
		{"bad1", "42", "ge", "8", -1, "corrupt mark at bad1"},
		{"s", "7", "ge", p53, 0, "7:" + p53a},
		{"s", "7", "ge", "", 1, "7:" + p53a}, // an equal token under >=: the pair stays
		{"s", "7", "gt", "", 0, "7:" + p53a},
		{"plain", "3", "gt", "", 1, "3"},
		{"bad2", "42", "gt", "", -1, "corrupt mark at bad2"},
		{"s", "7", "gt", max, 1, "7:" + max},
		{"s", "7", "ge", max, 0, "7:" + max},
		{"plain", "3", "ge", "0", 1, "3:0"}, // any sequence is above none
		{"plain", "3", "gt", "0", 0, "3:0"},
		{"s", "8", "ge", "", 1, "8"}, // a greater token alone drops the sequence
		{"bad3", "43", "ge", "1", -1, "corrupt mark at bad3"},
		{"s", "8", "ge", "0", 1, "8:0"},
		{"s", "7", "ge", "99", 0, "8:0"}, // a lower token, whatever its sequence
		{"pair", "5", "ge", "6", 0, "5:7"},
		{"pair", "6", "gt", "0", 1, "6:0"}, // a greater token, whatever its sequence
		{"max", max, "gt", max, 1, max + ":" + max},
		{"max", max, "ge", "", 1, max + ":" + max},
		{"max", max, "gt", max, 0, max + ":" + max},
	}
	var keys []string
	var args []any
	var want []any
	for _, st := range steps {
		keys = append(keys, st.key)
		args = append(args, st.token, st.mode, st.seq)
		want = append(want, st.flag, st.mark)
	}
	got, err := evalMarks(t, c, src, keys, args...)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("reply\n got %v\nwant %v", got, want)
	}
	for key, v := range map[string]string{"s": "8:0", "plain": "3:0", "pair": "6:0", "max": max + ":" + max,
		"bad1": "42:", "bad2": "42:07", "bad3": "42:7:1"} {
		if got, err := c.Get(ctx, key).Result(); err != nil || got != v {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, v)
		}
	}

	// With "w" (for WAIT) every decided key is written: an equal token
	// without a sequence, and a refusal, rewrite the pair, sequence and all.
	sets := setCalls(t, c)
	got, err = evalMarks(t, c, src, []string{"pair", "pair", "pair", "bad1"},
		"6", "ge", "", "6", "ge", "0", "5", "gt", "", "1", "ge", "", "w")
	if err != nil {
		t.Fatal(err)
	}
	want = []any{int64(1), "6:0", int64(0), "6:0", int64(0), "6:0", int64(-1), "corrupt mark at bad1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("reply with w\n got %v\nwant %v", got, want)
	}
	if n := setCalls(t, c) - sets; n != 3 {
		t.Errorf("with w the script ran %d SETs, want 3 (none on the corrupt key)", n)
	}
	for key, v := range map[string]string{"pair": "6:0", "bad1": "42:"} {
		if got, err := c.Get(ctx, key).Result(); err != nil || got != v {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, v)
		}
	}
}

func TestCorruptMark(t *testing.T) {
	srv := redistest.Start(t)
	s, prefix := newStore(t, srv, redisstore.Options{})
	c := srv.Client(t)
	ctx := t.Context()
	for i, v := range []string{"abc", "007", "00", "", "-1", "+1", " 1", "1 ", "1.5", "1e3", "0x10",
		"18446744073709551616", "99999999999999999999", "123456789012345678901",
		// A token and a sequence of any other shape than "t:s".
		"42:", ":7", ":", "42:07", "042:7", "42:7:1", "42::7", "42:-1", "42:+1", "42: 7", "42:7 ", "42:x",
		"42:18446744073709551616", "18446744073709551616:7", "42;7", "42,7"} {
		t.Run(fmt.Sprintf("%q", v), func(t *testing.T) {
			res := fmt.Sprintf("corrupt/%d", i)
			key := prefix + res
			if err := c.Set(ctx, key, v, 0).Err(); err != nil {
				t.Fatal(err)
			}
			for _, a := range []fencestore.Admission{
				{Resource: res, Token: 1<<64 - 1, Compare: fencestore.AtLeast},
				{Resource: res, Token: 1<<64 - 1, Compare: fencestore.Greater},
				{Resource: res, Token: 1<<64 - 1, Sequence: 1<<64 - 1, HasSequence: true},
				{Resource: res, Token: 42, Sequence: 8, HasSequence: true},
			} {
				d, err := s.Admit(ctx, a)
				if !errors.Is(err, fencestore.ErrUnavailable) {
					t.Errorf("Admit(%+v) over %q = %+v, %v; want ErrUnavailable", a, v, d, err)
				}
			}
			if _, _, err := s.Mark(ctx, res); !errors.Is(err, fencestore.ErrUnavailable) {
				t.Errorf("Mark over %q: err = %v, want ErrUnavailable", v, err)
			}
			if got, err := c.Get(ctx, key).Result(); err != nil || got != v {
				t.Errorf("value became %q (%v), want it untouched (%q)", got, err, v)
			}
		})
	}
	t.Run("wrong type", func(t *testing.T) {
		key := prefix + "hash"
		if err := c.HSet(ctx, key, "f", "1").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admit(ctx, fencestore.Admission{Resource: "hash", Token: 1, Compare: fencestore.AtLeast}); !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("Admit over a hash: err = %v, want ErrUnavailable", err)
		}
		if _, _, err := s.Mark(ctx, "hash"); !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("Mark over a hash: err = %v, want ErrUnavailable", err)
		}
	})
}

// TestScriptRejectsBadArguments runs admit.lua directly: a token, mode or
// sequence the Go side would never send is an error reply, not a guess.
func TestScriptRejectsBadArguments(t *testing.T) {
	file, err := os.ReadFile("admit.lua")
	if err != nil {
		t.Fatal(err)
	}
	src := redisstore.AdmitSource
	if first, _, _ := strings.Cut(string(file), "\n"); !strings.HasPrefix(first, "-- KEYS[") || !strings.Contains(first, "ARGV[1]") || !strings.Contains(first, "returns") {
		t.Errorf("admit.lua must open with its KEYS/ARGV/return header; first line: %q", first)
	}
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	one := []string{"args", "{args}:inflight"}
	for _, args := range [][]any{
		{"abc", "ge", "", "", ""}, {"007", "ge", "", "", ""}, {"", "gt", "", "", ""}, {"18446744073709551616", "gt", "", "", ""}, {"-1", "ge", "", "", ""},
		{"5", "xx", "", "", ""}, {"5", "", "", "", ""}, {"5", "GE", "", "", ""},
		{"5", "ge", "007", "", ""}, {"5", "ge", "-1", "", ""}, {"5", "ge", " 1", "", ""}, {"5", "ge", "1.5", "", ""}, {"5", "ge", "x", "", ""},
		{"5", "ge", "18446744073709551616", "", ""}, {"5", "ge", "1:2", "", ""}, {"5", "ge", "w", "", ""},
		// The barrier: "" or "<timeout_ms> <id>", at most 12 digits.
		{"5", "ge", "", "x", ""}, {"5", "ge", "", "0 a", ""}, {"5", "ge", "", "1000", ""}, {"5", "ge", "", "1000 ", ""},
		{"5", "ge", "", "01000 a", ""}, {"5", "ge", "", "1000000000000 a", ""}, {"5", "ge", "", "1000 a b", ""},
		{"5", "ge", "", "1000 a:b", ""}, {"5", "ge", "", "-1 a", ""}, {"5", "ge", "", " 1000 a", ""}, {"5", "ge", "", "1.5 a", ""},
		// The floor: "" or a mark as stored.
		{"5", "ge", "", "", "x"}, {"5", "ge", "", "", "007"}, {"5", "ge", "", "", "5:"}, {"5", "ge", "", "", ":5"},
		{"5", "ge", "", "", "5:07"}, {"5", "ge", "", "", "1:2:3"}, {"5", "ge", "", "", "18446744073709551616"}, {"5", "ge", "", "", "w"},
		{"5", "ge", "", "", "", "x"}, {"5", "ge", "", "", "", "w", "w"},
		{"5", "ge", "", ""}, {"5", "ge", "", "", "w"}, {"5", "ge", ""}, {"5", "ge", "", "w"}, {"5", "ge"}, // the forms of old
		{"5"}, {},
	} {
		if err := c.Eval(ctx, src, one, args...).Err(); err == nil {
			t.Errorf("EVAL admit.lua %q: no error", args)
		}
	}
	// A mark key alone (taken for the identity key), two pairs and an
	// identity key without the identity expected.
	if err := c.Eval(ctx, src, []string{"args"}, "5", "ge", "", "", "", "id").Err(); err == nil {
		t.Errorf("EVAL admit.lua with one key: no error")
	}
	for _, args := range [][]any{
		{"5", "ge", "", "", "", "6", "ge", "", "", ""}, {"5", "ge", "", "", "", "6", "ge", "", "", "", ""},
		{"5", "ge", "", "", "", "6", "ge", "", "", "", "w", ""}, {"5", "ge", "", "", "", "6", "ge", "", "", "", "x", "id"},
	} {
		if err := c.Eval(ctx, src, []string{"args", "{args}:inflight", "args2", "{args2}:inflight", "fence:"}, args...).Err(); err == nil {
			t.Errorf("EVAL admit.lua with an identity key and %q: no error", args)
		}
	}
	// A batch with one bad argument writes none of its keys.
	two := []string{"args", "{args}:inflight", "args2", "{args2}:inflight"}
	for _, args := range [][]any{
		{"5", "ge", "", "", "", "6", "gt", "", ""}, {"5", "ge", "", "", "", "6", "gt", "", "", "", "7"}, {"5", "ge", "", "", "", "007", "gt", "", "", ""},
		{"5", "ge", "", "", "", "6", "xx", "", "", ""}, {"5", "ge", "1", "", "", "6", "gt", "01", "", ""}, {"5", "ge", "", "", "", "6", "gt", "", "", "", "x"},
		{"5", "ge", "", "1000 a", "", "6", "gt", "", "1000", ""}, {"5", "ge", "", "", "4", "6", "gt", "", "", "4:"},
	} {
		if err := c.Eval(ctx, src, two, args...).Err(); err == nil {
			t.Errorf("EVAL admit.lua (2 admissions) %q: no error", args)
		}
	}
	if n, err := c.Exists(ctx, append(two, "args2")...).Result(); err != nil || n != 0 {
		t.Errorf("a rejected call wrote a key (EXISTS = %d, %v)", n, err)
	}
}

// evalMarks runs admit.lua with a mark key and (token, mode, sequence) per
// admission (and optionally "w"), without the barrier or a floor: it adds
// each in-flight key and empty barrier and floor arguments, checks that no
// admission entered the barrier or regressed, and returns the {flag, mark}
// pairs.
func evalMarks(t *testing.T, c *redis.Client, src string, marks []string, args ...any) ([]any, error) {
	t.Helper()
	var keys []string
	var all []any
	for i, m := range marks {
		keys = append(keys, m, "{"+m+"}:inflight")
		all = append(all, args[3*i:3*i+3]...)
		all = append(all, "", "") // no barrier, no floor
	}
	all = append(all, args[3*len(marks):]...)
	r, err := c.Eval(t.Context(), src, keys, all...).Slice()
	if err != nil {
		return nil, err
	}
	if len(r) != 7*len(marks) {
		t.Fatalf("admit.lua: %d admissions, %d replies: %v", len(marks), len(r), r)
	}
	var out []any
	for i := range marks {
		if fl := fmt.Sprint(r[7*i+2 : 7*i+7]); fl != "[ 0  0 0]" {
			t.Errorf("admit.lua entered %s in flight, or regressed it, without a barrier or a floor: %s", marks[i], fl)
		}
		out = append(out, r[7*i], r[7*i+1])
	}
	return out, nil
}

// One script run admits a batch: keys in order, each seeing the writes of
// those before it (the same key twice included), a corrupt mark failing only
// its own key.
func TestScriptBatch(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "bad", "007", 0).Err(); err != nil {
		t.Fatal(err)
	}
	src := redisstore.AdmitSource
	got, err := evalMarks(t, c, src, []string{"a", "a", "bad", "b", "a"},
		"5", "ge", "", "5", "gt", "", "9", "ge", "", "18446744073709551615", "gt", "", "4", "ge", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(1), "5", int64(0), "5", int64(-1), "corrupt mark at bad", int64(1), "18446744073709551615", int64(0), "5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batch reply %v, want %v", got, want)
	}
	if v, _ := c.Get(ctx, "bad").Result(); v != "007" {
		t.Fatalf("corrupt mark rewritten to %q", v)
	}
}

// A key of another type under the prefix (a hash, a list, a set) fails its
// own admission only: the keys before and after it in the same script run
// are decided and written as if it were not there, and it is left as it was.
func TestScriptForeignKeys(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	src := redisstore.AdmitSource
	if err := c.HSet(ctx, "hash", "f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(ctx, "list", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SAdd(ctx, "set", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range [][]any{nil, {"w"}} { // with "w" every key is written
		if err := c.Del(ctx, "a", "b", "c").Err(); err != nil {
			t.Fatal(err)
		}
		args := append([]any{"5", "gt", "", "1", "ge", "", "7", "gt", "3", "1", "gt", "", "9", "ge", "", "1", "ge", "2", "4", "gt", ""}, w...)
		got, err := evalMarks(t, c, src, []string{"a", "hash", "b", "list", "c", "set", "a"}, args...)
		if err != nil {
			t.Fatalf("EVAL %v: %v; want a reply per key", args, err)
		}
		wrong := "WRONGTYPE Operation against a key holding the wrong kind of value at "
		want := []any{int64(1), "5", int64(-1), wrong + "hash", int64(1), "7:3", int64(-1), wrong + "list",
			int64(1), "9", int64(-1), wrong + "set", int64(0), "5"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("EVAL %v:\n got %q\nwant %q", args, got, want)
		}
		for key, v := range map[string]string{"a": "5", "b": "7:3", "c": "9"} {
			if got, err := c.Get(ctx, key).Result(); err != nil || got != v {
				t.Errorf("GET %s = %q, %v; want %q", key, got, err, v)
			}
		}
		for key, typ := range map[string]string{"hash": "hash", "list": "list", "set": "set"} {
			if got, err := c.Type(ctx, key).Result(); err != nil || got != typ {
				t.Errorf("TYPE %s = %q, %v; want %s, untouched", key, got, err, typ)
			}
		}
	}
}

func TestNoScriptRecovery(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{})
	c := srv.Client(t)
	ctx := t.Context()
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: uint64(10 + i), Compare: fencestore.Greater})
		if err != nil || !d.Admitted {
			t.Fatalf("Admit after SCRIPT FLUSH = %+v, %v; want admitted", d, err)
		}
	}
}

func TestKilled(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{})
	if _, err := s.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 1, Compare: fencestore.AtLeast}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for _, name := range []string{"Admit", "Ping"} {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		start := time.Now()
		var err error
		if name == "Admit" {
			_, err = s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 2, Compare: fencestore.AtLeast})
		} else {
			err = s.Ping(ctx)
		}
		cancel()
		t.Logf("%s with Redis killed: %v after %v", name, err, time.Since(start))
		if !errors.Is(err, fencestore.ErrUnavailable) {
			t.Errorf("%s with Redis killed: err = %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 750*time.Millisecond {
			t.Errorf("%s with Redis killed took %v, want within the 500ms deadline", name, d)
		}
	}
}

func TestStopped(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{})
	if _, err := s.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 1, Compare: fencestore.AtLeast}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	defer srv.Cont()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 2, Compare: fencestore.AtLeast})
	if !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("Admit with Redis stopped: err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 700*time.Millisecond {
		t.Errorf("Admit with Redis stopped took %v, want about the 200ms deadline", d)
	}
}

func TestAOFSurvivesKill(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	s, prefix := newStore(t, srv, redisstore.Options{})
	ctx := t.Context()
	for res, token := range map[string]uint64{"a": 9007199254740993, "b": 1<<64 - 1} {
		if d, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: token, Compare: fencestore.Greater}); err != nil || !d.Admitted {
			t.Fatalf("Admit(%s) = %+v, %v", res, d, err)
		}
	}
	srv.Kill()
	srv.Restart(t)
	s2 := redisstore.New(redis.NewClient(srv.Options()), redisstore.Options{KeyPrefix: prefix})
	defer s2.Close()
	for res, want := range map[string]uint64{"a": 9007199254740993, "b": 1<<64 - 1} {
		if got, ok, err := s2.Mark(ctx, res); err != nil || !ok || got != want {
			t.Errorf("after kill and restart Mark(%s) = %d, %t, %v; want %d", res, got, ok, err, want)
		}
	}
	if d, err := s2.Admit(ctx, fencestore.Admission{Resource: "a", Token: 9007199254740992, Compare: fencestore.AtLeast}); err != nil || d.Admitted {
		t.Errorf("after restart Admit(a, 2^53) = %+v, %v; want refused", d, err)
	}
}

func TestMinReplicas(t *testing.T) {
	primary, replica := startReplicated(t)
	pc := primary.Client(t)
	ctx := t.Context()
	// A generous timeout where the replica is expected to answer: its first
	// acknowledgement can be slow on a loaded machine.
	s, _ := newStore(t, primary, redisstore.Options{MinReplicas: 1, WaitTimeout: 2 * time.Second})

	if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err != nil || !d.Admitted {
		t.Fatalf("Admit with the replica up = %+v, %v; want admitted", d, err)
	}

	t.Run("equal token writes", func(t *testing.T) {
		before := info(t, pc, "master_repl_offset")
		if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err != nil || !d.Admitted {
			t.Fatalf("Admit(5, >=) at mark 5 = %+v, %v; want admitted", d, err)
		}
		if after := info(t, pc, "master_repl_offset"); after == before {
			t.Errorf("master_repl_offset stayed %s: the equal-token admission wrote nothing for WAIT to count", before)
		}
		// A refusal writes too (the script's SET is counted in commandstats):
		// the acknowledgement must cover the mark it reports.
		sets := setCalls(t, pc)
		if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 4, Compare: fencestore.AtLeast}); err != nil || d.Admitted || d.Mark != 5 {
			t.Fatalf("Admit(4) at mark 5 = %+v, %v; want refused with mark 5", d, err)
		}
		if got := setCalls(t, pc); got != sets+1 {
			t.Errorf("SET calls %d -> %d: the refusal did not rewrite its mark for WAIT to count", sets, got)
		}
		// Without MinReplicas the same admission writes nothing.
		s0, prefix0 := newStore(t, primary, redisstore.Options{})
		if _, err := s0.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err != nil {
			t.Fatal(err)
		}
		before = info(t, pc, "master_repl_offset")
		if _, err := s0.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err != nil {
			t.Fatal(err)
		}
		if after := info(t, pc, "master_repl_offset"); after != before {
			t.Errorf("master_repl_offset moved %s -> %s for an admission that changed nothing (%s)", before, after, prefix0)
		}
	})

	// With a sequence, on the script-and-WAIT path: the pair is what the
	// replica acknowledges, and a rewrite for WAIT (an equal token without a
	// sequence, a stale sequence) keeps the sequence.
	t.Run("sequence", func(t *testing.T) {
		rc := replica.Client(t)
		s, prefix := newStore(t, primary, redisstore.Options{MinReplicas: 1, WaitTimeout: 2 * time.Second})
		key := prefix + "seq"
		for i, st := range []struct {
			a     fencestore.Admission
			want  fencestore.Decision
			value string
		}{
			{fencestore.Admission{Token: 5, Sequence: 7, HasSequence: true},
				fencestore.Decision{Admitted: true, Mark: 5, Sequence: 7, HasSequence: true}, "5:7"},
			{fencestore.Admission{Token: 5, Compare: fencestore.AtLeast},
				fencestore.Decision{Admitted: true, Mark: 5, Sequence: 7, HasSequence: true}, "5:7"},
			{fencestore.Admission{Token: 5, Sequence: 7, HasSequence: true},
				fencestore.Decision{Mark: 5, Sequence: 7, HasSequence: true}, "5:7"},
			{fencestore.Admission{Token: 5, Sequence: 1<<53 + 1, HasSequence: true},
				fencestore.Decision{Admitted: true, Mark: 5, Sequence: 1<<53 + 1, HasSequence: true}, "5:9007199254740993"},
			{fencestore.Admission{Token: 5, Sequence: 1 << 53, HasSequence: true},
				fencestore.Decision{Mark: 5, Sequence: 1<<53 + 1, HasSequence: true}, "5:9007199254740993"},
			{fencestore.Admission{Token: 6, Compare: fencestore.Greater},
				fencestore.Decision{Admitted: true, Mark: 6}, "6"},
		} {
			st.a.Resource = "seq"
			sets := setCalls(t, pc)
			d, err := s.Admit(ctx, st.a)
			if err != nil || d != st.want {
				t.Fatalf("step %d: Admit(%+v) = %+v, %v; want %+v", i, st.a, d, err, st.want)
			}
			// Every decision writes with WAIT, and the replica acknowledged it.
			if n := setCalls(t, pc) - sets; n != 1 {
				t.Errorf("step %d: %d SETs, want 1", i, n)
			}
			for name, c := range map[string]*redis.Client{"primary": pc, "replica": rc} {
				if got, err := c.Get(ctx, key).Result(); err != nil || got != st.value {
					t.Errorf("step %d: GET %s on the %s = %q, %v; want %q", i, key, name, got, err, st.value)
				}
			}
		}
	})

	t.Run("NOSCRIPT", func(t *testing.T) {
		if err := pc.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 6, Compare: fencestore.Greater}); err != nil || !d.Admitted {
			t.Fatalf("Admit after SCRIPT FLUSH = %+v, %v; want admitted", d, err)
		}
	})

	t.Run("too few replicas", func(t *testing.T) {
		s2, _ := newStore(t, primary, redisstore.Options{MinReplicas: 2, WaitTimeout: 300 * time.Millisecond})
		_, err := s2.Admit(ctx, fencestore.Admission{Resource: "r", Token: 1, Compare: fencestore.AtLeast})
		var ack *redisstore.ReplicaAckError
		if !errors.Is(err, fencestore.ErrUnavailable) || !errors.As(err, &ack) || ack.Acked >= 2 || ack.Want != 2 {
			t.Fatalf("Admit wanting 2 replicas of 1: err = %v, want ErrUnavailable and fewer than 2 acknowledged", err)
		}
		t.Log(err)
	})

	t.Run("replica stopped", func(t *testing.T) {
		s, prefix := newStore(t, primary, redisstore.Options{MinReplicas: 1, WaitTimeout: 100 * time.Millisecond})
		replica.Stop()
		defer replica.Cont()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 7, Compare: fencestore.Greater})
		elapsed := time.Since(start)
		var ack *redisstore.ReplicaAckError
		if !errors.Is(err, fencestore.ErrUnavailable) || !errors.As(err, &ack) || ack.Acked != 0 {
			t.Fatalf("Admit with the replica stopped = %+v, %v; want ErrUnavailable, 0 acknowledged", d, err)
		}
		// Redis notices WAIT's timeout on its event loop, every 1/hz (100ms).
		if elapsed < 90*time.Millisecond || elapsed > time.Second {
			t.Errorf("Admit with the replica stopped took %v, want about the 100ms WaitTimeout", elapsed)
		}
		t.Logf("%v after %v", err, elapsed)

		// The script set 7 on the primary; the replica does not have it. A
		// lower token must not be told "stale, the mark is 7": a failover
		// now would take 7 back. Unacknowledged, it is unavailable.
		// The refusal comes from a store of its own, on the same keys: its
		// connection has written nothing before, so only the refusal's own
		// write makes WAIT wait for the replica.
		fresh := redisstore.New(redis.NewClient(primary.Options()),
			redisstore.Options{KeyPrefix: prefix, MinReplicas: 1, WaitTimeout: 100 * time.Millisecond})
		defer fresh.Close()
		d, err = fresh.Admit(ctx, fencestore.Admission{Resource: "r", Token: 2, Compare: fencestore.AtLeast})
		if !errors.Is(err, fencestore.ErrUnavailable) || !errors.As(err, &ack) {
			t.Fatalf("a refusal with the replica stopped = %+v, %v; want ErrUnavailable, unacknowledged", d, err)
		}
	})
}

func TestPolicyMayEvict(t *testing.T) {
	for policy, want := range map[string]bool{
		"noeviction":      false,
		"volatile-lru":    false,
		"volatile-lfu":    false,
		"volatile-random": false,
		"volatile-ttl":    false,
		"allkeys-lru":     true,
		"allkeys-lfu":     true,
		"allkeys-random":  true,
		"some-new-policy": true, // unknown: assume the worst
		"":                true,
	} {
		if got := redisstore.PolicyMayEvict(policy); got != want {
			t.Errorf("PolicyMayEvict(%q) = %t, want %t", policy, got, want)
		}
	}
}

func TestClientOptionWarnings(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: 3})
	s := redisstore.New(c, redisstore.Options{Logger: zap.New(core)})
	defer s.Close()
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "ContextTimeoutEnabled") || !strings.Contains(all, "MaxRetries") {
		t.Errorf("warnings: %q; want one about ContextTimeoutEnabled and one about MaxRetries", msgs)
	}

	core, logs = observer.New(zap.WarnLevel)
	good := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1}),
		redisstore.Options{Logger: zap.New(core)})
	defer good.Close()
	if n := logs.Len(); n != 0 {
		t.Errorf("%d warnings for a well-configured client", n)
	}
}

// BenchmarkAdmit measures one admission against a local redis-server:
// sequential (one caller, so group commit has nothing to group) and from 8
// callers per CPU, with group commit (the default) and without it.
func BenchmarkAdmit(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	b.Run("single", func(b *testing.B) {
		s, _ := newStore(b, srv, redisstore.Options{})
		b.ReportAllocs()
		var token uint64
		for b.Loop() {
			token++
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token, Compare: fencestore.AtLeast}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		opts redisstore.Options
	}{{"parallel-batched", redisstore.Options{}}, {"parallel-unbatched", redisstore.Options{MaxBatch: -1}}} {
		b.Run(bc.name, func(b *testing.B) { benchParallel(b, srv, bc.opts) })
	}
}

func benchParallel(b *testing.B, srv *redistest.Server, opts redisstore.Options) {
	ctx := context.Background()
	s, _ := newStore(b, srv, opts)
	var token atomic.Uint64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token.Add(1), Compare: fencestore.AtLeast}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// With MinReplicas, a write the replicas never acknowledged (WAIT timed
// out: its request got 503) does not count as seen: a server that answers
// later without it (a replica promoted after a replication hiccup, here
// the generation set back to what the replica holds) has lost nothing
// anyone relied on, and admits. Before, its generation was seen before
// WAIT's answer, and that server was refused as gone back in time
// (store-lost, until an operator acted).
func TestUnacknowledgedGenerationNotSeen(t *testing.T) {
	primary, replica := startReplicated(t)
	ctx := t.Context()
	s, prefix := newStore(t, primary, redisstore.Options{MinReplicas: 1, WaitTimeout: 2 * time.Second})
	id, err := s.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	admit := func(token uint64) (fencestore.Decision, error) {
		return s.Admit(ctx, fencestore.Admission{Resource: "r", Token: token, Compare: fencestore.Greater})
	}
	if d, err := admit(1); err != nil || !d.Admitted {
		t.Fatalf("Admit(1) = %+v, %v; want admitted", d, err)
	}
	gkey := "{" + prefix + "}:generation"
	pc := primary.Client(t)
	acked, err := pc.HGet(ctx, gkey, "g").Result()
	if err != nil {
		t.Fatal(err)
	}

	replica.Stop()
	t.Cleanup(replica.Cont) // whatever fails below
	var ackErr *redisstore.ReplicaAckError
	if _, err := admit(2); !errors.Is(err, fencestore.ErrUnavailable) || !errors.As(err, &ackErr) {
		t.Fatalf("Admit(2) with the replica frozen = %v; want unavailable, not acknowledged", err)
	}
	if g, _ := pc.HGet(ctx, gkey, "g").Result(); g == acked {
		t.Fatalf("the generation stayed %s: the refused admission wrote nothing", g)
	}
	// The server now answers as the replica, promoted, would: without the
	// write it never acknowledged.
	if err := pc.HSet(ctx, gkey, "g", acked).Err(); err != nil {
		t.Fatal(err)
	}
	replica.Cont()
	if d, err := admit(3); err != nil || !d.Admitted {
		t.Fatalf("Admit(3) after the unacknowledged write was lost = %+v, %v; want admitted", d, err)
	}
}
