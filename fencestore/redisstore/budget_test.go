package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// TestAdmissionCommandBudget holds the commands Redis runs per admitted
// request in the common case to a stated budget: one writer, 1,000
// resources, each request a token above every one before on its resource,
// nothing older in flight, each released after its admission. The counts
// are INFO commandstats deltas against a real redis-server, so they are
// exact, not timed. The releases linger a minute for an admission to ride
// (Options.ReleaseLinger): with one writer the next admission always
// comes first, so each release rides it, whatever the machine's load (the
// default linger, 500µs, makes that the usual case, not a certainty), with
// group commit and without. The
// last release goes alone at Close: a run of release.lua, which the server
// has not seen yet (NOSCRIPT, then EVAL), with its ZREM.
//
// Per admission, barrier on: one script run carrying the admission and the
// release before it, GET and SET of the mark, ZADD (the entry) and PEXPIRE
// NX (the new in-flight key's TTL, whose answer also says the key is new,
// so that nothing older is in it: no look), and the release's ZREM (of the
// entry and its flag, whose count says nobody waits for it: no look
// either): 6. A store whose identity is checked adds GET (identity) and
// HMGET and HINCRBY (generation) once per script run: 9. The looks of the
// barrier (ZRANGEBYLEX, PTTL) and PUBLISH run only when something older is
// in flight, so never here.
func TestAdmissionCommandBudget(t *testing.T) {
	srv := redistest.Start(t)
	const resources, n = 1000, 300
	for _, tc := range []struct {
		name     string
		drain    bool
		identity bool
		opts     redisstore.Options
		// budget is the commands per admission, the script runs counted;
		// runs the script runs per admission.
		budget, runs int64
	}{
		{"barrier off", false, false, redisstore.Options{}, 3, 1},
		{"barrier on", true, false, redisstore.Options{}, 6, 1},
		{"barrier on, identity checked", true, true, redisstore.Options{}, 9, 1},
		{"barrier on, no batching", true, false, redisstore.Options{MaxBatch: -1}, 6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ReleaseLinger = time.Minute
			s, _ := newStore(t, srv, tc.opts)
			ctx := t.Context()
			if tc.identity {
				id, err := s.Init(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				s.Expect(id)
			}
			var flight time.Duration
			if tc.drain {
				flight = 30 * time.Second
			}
			admit := func(i int) {
				t.Helper()
				d, err := s.Admit(ctx, fencestore.Admission{Resource: "r" + strconv.Itoa(i%resources),
					Token: uint64(1_000_000 + i), Flight: flight})
				switch {
				case err != nil:
					t.Fatal(err)
				case !d.Admitted || d.Flight.Older:
					t.Fatalf("admission %d: %+v; want admitted, nothing older in flight", i, d)
				}
				s.Release(d.Flight)
			}
			// Every resource's mark set first: the loop is the steady state.
			for i := range resources {
				admit(i)
			}
			before := commandCounts(t, srv)
			for i := resources; i < resources+n; i++ {
				admit(i)
			}
			if err := s.Close(); err != nil { // sends the last release
				t.Fatal(err)
			}
			after := commandCounts(t, srv)
			delta, calls := commandDelta(before, after)
			runs := delta["evalsha"] + delta["eval"]
			// The last release's runs alone, with the barrier.
			var last, lastRuns int64
			if tc.drain {
				last, lastRuns = 3, 2
			}
			t.Logf("%d admissions: %d commands (%.2f per admission), %d script runs: %v",
				n, calls, float64(calls)/n, runs, delta)
			if calls > tc.budget*n+last {
				t.Errorf("%d commands for %d admissions (%.2f each); budget %d each", calls, n, float64(calls)/n, tc.budget)
			}
			if runs > tc.runs*n+lastRuns {
				t.Errorf("%d script runs for %d admissions; budget %d each", runs, n, tc.runs)
			}
			for _, name := range []string{"publish", "zrangebylex", "pttl"} {
				if c := delta[name]; c != 0 {
					t.Errorf("%d %s with nothing older in flight", c, strings.ToUpper(name))
				}
			}
		})
	}
}

// commandCounts returns the calls of each command, INFO and a new
// connection's handshake (HELLO, CLIENT SETINFO) left out: what the test
// itself sends to read them.
// commandDelta is what ran between two commandCounts: per command, and in
// all.
func commandDelta(before, after map[string]int64) (map[string]int64, int64) {
	delta := make(map[string]int64)
	var calls int64
	for name, c := range after {
		if d := c - before[name]; d != 0 {
			delta[name] = d
			calls += d
		}
	}
	return delta, calls
}

func commandCounts(t *testing.T, srv *redistest.Server) map[string]int64 {
	t.Helper()
	text, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(fmt.Errorf("INFO commandstats: %w", err))
	}
	out := parseCommandStats(text)
	for name := range out {
		if name == "hello" || strings.HasPrefix(name, "client") {
			delete(out, name)
		}
	}
	return out
}

// TestContendedCommandBudget holds the commands Redis runs per admitted
// request when one older request of the resource is always in flight: one
// writer of one lease, each request a new sequence, each released after
// the next one's admission (riding its script run, as the minute's linger
// makes certain). Per admission: one script run, GET and SET of the mark,
// ZRANGEBYLEX (the snapshot: the store knows a request of the resource is
// in flight here, so it looks first), one ZADD (the entry and the older
// one's flag), PTTL (the key's TTL, there already), and the release of the
// older one: ZREM (it and its flag) and PUBLISH (its waiter may be on
// another replica): 8 (9 before, the release looking before it announced;
// 10 with the common case's order, PEXPIRE NX first, for this case).
func TestContendedCommandBudget(t *testing.T) {
	srv := redistest.Start(t)
	const n = 300
	s, _ := newStore(t, srv, redisstore.Options{ReleaseLinger: time.Minute})
	ctx := t.Context()
	admit := func(seq uint64) fencestore.Flight {
		t.Helper()
		d, err := s.Admit(ctx, fencestore.Admission{Resource: "hot", Token: 1, Sequence: seq, HasSequence: true,
			Flight: 30 * time.Second})
		if err != nil || !d.Admitted || (seq > 1 && !d.Flight.Older) {
			t.Fatalf("admission %d: %+v, %v; want admitted, the one before in flight", seq, d, err)
		}
		return d.Flight
	}
	// The first two: the key made, the scripts known to the server.
	first := admit(1)
	prev := admit(2)
	s.Release(first)
	before := commandCounts(t, srv)
	for seq := uint64(3); seq < 3+n; seq++ {
		f := admit(seq)
		s.Release(prev)
		prev = f
	}
	after := commandCounts(t, srv)
	delta, calls := commandDelta(before, after)
	t.Logf("%d admissions: %d commands (%.2f per admission): %v", n, calls, float64(calls)/n, delta)
	// Each once per admission, and nothing else (no PEXPIRE, a second
	// ZRANGEBYLEX or ZADD). ZREM may run more often: a subscription that
	// comes back after a break (a health check that timed out on a busy
	// machine) sends the latest releases again, which find nothing.
	for _, name := range []string{"evalsha", "get", "set", "zrangebylex", "zadd", "pttl", "publish"} {
		if c := delta[name]; c != n {
			t.Errorf("%d %s for %d admissions, want one each", c, strings.ToUpper(name), n)
		}
		delete(delta, name)
	}
	if c := delta["zrem"]; c < n {
		t.Errorf("%d ZREM for %d releases", c, n)
	}
	delete(delta, "zrem")
	if len(delta) != 0 {
		t.Errorf("other commands: %v", delta)
	}
	s.Release(prev)
}
