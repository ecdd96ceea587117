package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// TestFlightKey checks the in-flight key beside each mark key, and, on a
// cluster-enabled server (CLUSTER KEYSLOT), that it shares the mark's slot
// exactly when flightKey says so.
func TestFlightKey(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := srv.Client(t)
	slot := func(key string) int64 {
		t.Helper()
		n, err := c.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		return n
	}
	for _, tc := range []struct {
		mark, want string
		same       bool
	}{
		// No braces: the mark is the tag of its in-flight key, whole.
		{"fence:orders/42", "{fence:orders/42}:inflight", true},
		{"x", "{x}:inflight", true},
		// A '{' without a '}' is no tag, and stays none inside the new one.
		{"fence:a{b", "{fence:a{b}:inflight", true},
		{"{", "{{}:inflight", true},
		// A hash tag: the in-flight key is named after it, the first one
		// decides, and begins with '{' as no mark key does.
		{"fence:{orders}/42", "{orders}:inflight:fence:{orders}/42", true},
		{"{a}b", "{a}:inflight:{a}b", true},
		{"x}{y}", "{y}:inflight:x}{y}", true},
		{"a{b}}", "{b}:inflight:a{b}}", true},
		{"a{b}{c}", "{b}:inflight:a{b}{c}", true},
		{"{{a}}", "{{a}:inflight:{{a}}", true},
		// A '}' but no tag: the mark hashes whole, and no other name does
		// as it does.
		{"a{}b", "{}:inflight:a{}b", false},
		{"{}{a}", "{}:inflight:{}{a}", false},
		{"}x", "{}:inflight:}x", false},
		{"fence:a}b", "{}:inflight:fence:a}b", false},
		{"", "{}:inflight:", false},
	} {
		got, same := flightKey(tc.mark)
		if got != tc.want || same != tc.same {
			t.Errorf("flightKey(%q) = %q, %t; want %q, %t", tc.mark, got, same, tc.want, tc.same)
			continue
		}
		if (slot(tc.mark) == slot(got)) != tc.same {
			t.Errorf("%q in slot %d, %q in slot %d; flightKey says same slot: %t", tc.mark, slot(tc.mark), got, slot(got), tc.same)
		}
	}
}

func TestOrder41(t *testing.T) {
	for _, tc := range []struct {
		m    fencestore.Mark
		want string
	}{
		{fencestore.Mark{Token: 42}, "00000000000000000042:--------------------"},
		{fencestore.Mark{Token: 42, Sequence: 7, HasSequence: true}, "00000000000000000042:00000000000000000007"},
		{fencestore.Mark{Token: 1<<64 - 1, Sequence: 0, HasSequence: true}, "18446744073709551615:00000000000000000000"},
	} {
		if got := order41(tc.m); got != tc.want {
			t.Errorf("order41(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
	// The bytes sort as Mark.Before orders.
	marks := []fencestore.Mark{{Token: 1}, {Token: 1, Sequence: 0, HasSequence: true}, {Token: 1, Sequence: 9, HasSequence: true},
		{Token: 1, Sequence: 10, HasSequence: true}, {Token: 2}, {Token: 10}, {Token: 1<<64 - 1}}
	for i, a := range marks {
		for j, b := range marks {
			if before := order41(a) < order41(b); before != a.Before(b) || before != (i < j) {
				t.Errorf("order41(%+v) < order41(%+v) is %t; Before says %t", a, b, before, a.Before(b))
			}
		}
	}
}

// A release rides the admissions' pipeline, ahead of them: a worker that
// starts with a release and an admission waiting sends both in one
// pipeline (one round trip), and the admission does not find the entry
// just released. Also when the server lacks release.lua (NOSCRIPT: it runs
// after the admission, by EVAL, and the admission looks again).
func TestBatchCarriesReleases(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T)
	}{
		{"cached", func(t *testing.T) {
			if err := releaseScript.Load(t.Context(), c).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"NOSCRIPT", func(t *testing.T) {
			if err := c.ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := admitScript.Load(t.Context(), c).Err(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testBatchCarriesReleases(t, srv, "fence:carry-"+tc.name+":", tc.prepare) })
	}
}

func testBatchCarriesReleases(t *testing.T, srv *redistest.Server, prefix string, prepare func(t *testing.T)) {
	ctx := t.Context()
	// The older request enters through a store of its own.
	other := New(redis.NewClient(srv.Options()), Options{KeyPrefix: prefix, MaxBatch: -1})
	defer other.Close()
	d, err := other.Admit(ctx, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute})
	if err != nil || !d.Flight.Registered() {
		t.Fatalf("Admit(41) = %+v, %v", d, err)
	}
	prepare(t)

	// A batcher whose worker starts once the release and the admission
	// wait, so that both are there for its first pipeline.
	client := redis.NewClient(srv.Options())
	s := New(client, Options{KeyPrefix: prefix, MaxBatch: -1})
	defer s.Close()
	var mu sync.Mutex
	var pipelines [][2]int
	b := &batcher{client: client, oneCall: true, queue: make(chan *admission, 16), maxBatch: 16,
		pend: s.pend, kick: make(chan struct{}, 1), channel: s.channel, log: zap.NewNop(),
		stop: make(chan struct{}), stopped: make(chan struct{}),
		onExec: func(admissions, releases int) {
			mu.Lock()
			pipelines = append(pipelines, [2]int{admissions, releases})
			mu.Unlock()
		}}
	s.batch = b

	s.Release(d.Flight)
	type result struct {
		d   fencestore.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute})
		done <- result{d, err}
	}()
	redistest.Poll(t, 5*time.Second, "the admission queued", func() error {
		if n := len(b.queue); n != 1 {
			return fmt.Errorf("%d queued", n)
		}
		return nil
	})
	b.wg.Add(1)
	go b.run()
	r := <-done
	if r.err != nil || !r.d.Admitted || !r.d.Flight.Registered() {
		t.Fatalf("Admit(42) = %+v, %v", r.d, r.err)
	}
	if r.d.Flight.Older {
		t.Errorf("42 finds 41 in flight, released ahead of it")
	}
	mu.Lock()
	got := fmt.Sprint(pipelines)
	mu.Unlock()
	if got != "[[1 1]]" {
		t.Errorf("pipelines (admissions, releases): %s, want one with both: [[1 1]]", got)
	}
	fkey, _ := flightKey(prefix + "r")
	if members, err := srv.Client(t).ZRange(ctx, fkey, 0, -1).Result(); err != nil || len(members) != 1 || members[0] != r.d.Flight.Ref {
		t.Errorf("ZRANGE %s = %q, %v; want 42's entry alone", fkey, members, err)
	}
	redistest.Poll(t, 5*time.Second, "no release pending", func() error {
		s.pend.mu.Lock()
		defer s.pend.mu.Unlock()
		if n := len(s.pend.m); n != 0 {
			return fmt.Errorf("%d releases pending after their pipeline", n)
		}
		return nil
	})
}

// A release made before an admission is queued runs before it is decided,
// even when it is on its way in another pipeline: the admission's pipeline
// carries it again, ahead of itself.
func TestPendingReleaseTake(t *testing.T) {
	var p pendingReleases
	p.max = 3
	a, b, c := release{"k1", "a"}, release{"k2", "b"}, release{"k1", "c"}
	for _, r := range []release{a, b, c} {
		if old, dropped := p.add(r, time.Time{}); dropped {
			t.Fatalf("add(%v) dropped %v below the bound", r, old)
		}
	}
	rels, own := p.take(nil, nil)
	if own != 3 || len(rels) != 3 {
		t.Fatalf("take = %v, %d; want all 3 owned", rels, own)
	}
	// Sent, not done: only a pipeline that enters k1 carries them again.
	if rels, own := p.take(nil, map[string]bool{"k1": true}); own != 0 || len(rels) != 2 {
		t.Errorf("take for k1 = %v, %d; want a and c, owned by another", rels, own)
	}
	if rels, own := p.take(nil, map[string]bool{"k9": true}); own != 0 || len(rels) != 0 {
		t.Errorf("take for k9 = %v, %d; want none", rels, own)
	}
	if got := p.forKey(nil, "k2"); len(got) != 1 || got[0] != b {
		t.Errorf("forKey(k2) = %v, want [b]", got)
	}
	p.done(rels)
	if len(p.m) != 0 {
		t.Errorf("%d left after done", len(p.m))
	}
}

// An admission whose caller gave up while it ran leaves no entry behind to
// hold the later requests of its resource until its deadline: the store
// releases it by its order and id (the member is not known).
func TestAbandonedAdmissionReleased(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts Options
	}{{"batched", Options{}}, {"unbatched", Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.KeyPrefix = "fence:abandon-" + tc.name + ":"
			s := New(redis.NewClient(srv.Options()), tc.opts)
			defer s.Close()
			fkey, _ := flightKey(tc.opts.KeyPrefix + "r")
			// A connection ready before the server is busy: a new one would
			// wait in its handshake, and the admission never be sent.
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: "warm", Token: 1}); err != nil {
				t.Fatal(err)
			}
			// A script that blocks the server for a while: the admission
			// behind it runs after its caller's deadline.
			busy := make(chan error, 1)
			go func() {
				busy <- c.Eval(ctx, "local t = redis.call('TIME') while true do local n = redis.call('TIME') if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > 300000 then return 1 end end", nil).Err()
			}()
			time.Sleep(50 * time.Millisecond)
			actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err := s.Admit(actx, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute})
			cancel()
			if err == nil {
				t.Fatal("Admit behind a busy server answered within 100ms")
			}
			if err := <-busy; err != nil {
				t.Fatal(err)
			}
			redistest.Poll(t, 5*time.Second, "the abandoned entry released", func() error {
				if n, err := c.ZCard(ctx, fkey).Result(); err != nil || n != 0 {
					return fmt.Errorf("ZCARD %s = %d, %v", fkey, n, err)
				}
				if v, err := c.Get(ctx, tc.opts.KeyPrefix+"r").Result(); err != nil || v != "41" {
					return fmt.Errorf("the admission did not run: GET = %q, %v", v, err)
				}
				return nil
			})
		})
	}
}

// Admissions whose callers give up while the group-commit queue is stuck
// behind a frozen Redis were never sent: they leave no release to retry
// (each would be retried for days and could push a real release out of
// the bounded pending set).
func TestUnsentAdmissionsAbandonNothing(t *testing.T) {
	srv := redistest.Start(t)
	s := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "unsent:", Pipelines: 1, MaxBatch: 4})
	t.Cleanup(func() { srv.Cont(); _ = s.Close() })
	owed := func() int {
		s.pend.mu.Lock()
		defer s.pend.mu.Unlock()
		return len(s.pend.m)
	}
	srv.Stop()
	// The one pipeline is taken by an admission that waits long.
	blocker := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := s.Admit(ctx, fencestore.Admission{Resource: "blocker", Token: 1, Flight: time.Minute})
		blocker <- err
	}()
	redistest.Poll(t, 5*time.Second, "the blocker taken by the pipeline", func() error {
		if n := len(s.batch.queue); n != 0 {
			return fmt.Errorf("%d queued", n)
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond) // into its exec
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: fmt.Sprintf("r%d", i), Token: 1, Flight: time.Minute}); err == nil {
				t.Errorf("admission %d answered by a frozen Redis", i)
			}
		}()
	}
	wg.Wait()
	if got := owed(); got != 0 {
		t.Fatalf("%d releases owed for %d admissions that never left the queue", got, n)
	}
	srv.Cont()
	<-blocker
}
