package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// take builds a batch in queue order, leaving in place what may not share
// it: a second admission of a resource, another expected identity, what
// would pass the bounds; releases fill the room the admissions leave.
func TestBatchTake(t *testing.T) {
	q := func(key, expect string, size, depth int) *queued {
		return &queued{p: &plan{key: key}, expect: expect, size: size, depth: depth}
	}
	keys := func(qs []*queued) []string {
		var out []string
		for _, x := range qs {
			out = append(out, x.p.key+"/"+x.expect)
		}
		return out
	}
	b := &batcher{rels: map[string]time.Time{}, maxOps: 10, maxBytes: 1000}
	b.queue = []*queued{q("a", "", 10, 3), q("b", "", 10, 3), q("a", "", 10, 3), q("c", "x", 10, 3),
		q("d", "", 10, 4), q("e", "", 10, 3), q("f", "", 10, 3), q("g", "", 10, 3)}
	// a, b, d: 3 admissions at depth 4 make 7; e would make 8, f 9, g 10.
	got := b.take()
	if want := []string{"a/", "b/", "d/", "e/", "f/", "g/"}; !slices.Equal(keys(got.adms), want) {
		t.Errorf("first batch %v, want %v", keys(got.adms), want)
	}
	if want := []string{"a/", "c/x"}; !slices.Equal(keys(b.queue), want) {
		t.Errorf("left %v, want %v", keys(b.queue), want)
	}
	if got = b.take(); !slices.Equal(keys(got.adms), []string{"a/"}) {
		t.Errorf("second batch %v", keys(got.adms))
	}
	if got = b.take(); !slices.Equal(keys(got.adms), []string{"c/x"}) || len(b.queue) != 0 {
		t.Errorf("third batch %v, left %v", keys(got.adms), keys(b.queue))
	}

	// Bytes: the first admission goes whatever its size.
	b.queue = []*queued{q("a", "", 2000, 3), q("b", "", 10, 3)}
	if got = b.take(); len(got.adms) != 1 || len(b.queue) != 1 {
		t.Errorf("an admission above the byte bound: batch %v, left %v", keys(got.adms), keys(b.queue))
	}
	b.queue = []*queued{q("a", "", 600, 3), q("b", "", 600, 3), q("c", "", 300, 3)}
	if got = b.take(); !slices.Equal(keys(got.adms), []string{"a/", "c/"}) {
		t.Errorf("byte bound: batch %v", keys(got.adms))
	}
	b.queue = nil

	// Releases: as many as the ops left after the admissions' widest path.
	for i := range 20 {
		b.rels[fmt.Sprintf("r%02d", i)] = time.Now().Add(time.Hour)
	}
	b.queue = []*queued{q("a", "", 10, 3), q("b", "", 10, 3)}
	got = b.take()
	if len(got.adms) != 2 || len(got.rels) != 10-2-3 || len(b.rels) != 20-5 {
		t.Errorf("with releases: %d admissions, %d releases, %d left", len(got.adms), len(got.rels), len(b.rels))
	}
	if got = b.take(); len(got.adms) != 0 || len(got.rels) != 10 {
		t.Errorf("releases alone: %d admissions, %d releases", len(got.adms), len(got.rels))
	}
	// Many of both: the releases keep half of the room.
	b.maxOps = 40
	clear(b.rels)
	for i := range 100 {
		b.rels[fmt.Sprintf("r%02d", i)] = time.Now().Add(time.Hour)
		b.queue = append(b.queue, q(fmt.Sprint(i), "", 10, 3))
	}
	if got = b.take(); len(got.rels) != 20 || len(got.adms) != 40-20-3 {
		t.Errorf("a long queue of both: %d admissions, %d releases", len(got.adms), len(got.rels))
	}
}

// While a batch is in flight, another leaves only for a long queue, or
// once the one in flight has taken stuckAfter.
func TestBatchNext(t *testing.T) {
	b := &batcher{rels: map[string]time.Time{}, maxOps: defaultMaxTxnOps, maxBytes: maxBatchBytes}
	add := func(n int) {
		for range n {
			b.queue = append(b.queue, &queued{p: &plan{key: fmt.Sprint(len(b.queue))}, size: 10, depth: 7})
		}
	}
	add(3)
	if t1, _ := b.next(); len(t1.adms) != 3 || b.sending != 1 {
		t.Fatalf("idle: %d admissions, %d in flight", len(t1.adms), b.sending)
	}
	if t2, wait := b.next(); !t2.empty() || wait != 0 {
		t.Fatalf("one in flight, nothing queued: %d admissions, wait %v", len(t2.adms), wait)
	}
	add(secondBatchAt - 1)
	if t2, wait := b.next(); !t2.empty() || len(b.queue) != secondBatchAt-1 || wait <= 0 || wait > stuckAfter {
		t.Fatalf("one in flight, a short queue: %d admissions taken, wait %v", len(t2.adms), wait)
	}
	b.lastSent = time.Now().Add(-stuckAfter)
	if t2, _ := b.next(); len(t2.adms) != secondBatchAt-1 || b.sending != 2 {
		t.Fatalf("one in flight for stuckAfter: %d admissions, %d in flight", len(t2.adms), b.sending)
	}
	add(secondBatchAt)
	if t3, _ := b.next(); len(t3.adms) != secondBatchAt || b.sending != 3 {
		t.Fatalf("two in flight, a long queue: %d admissions, %d in flight", len(t3.adms), b.sending)
	}
}

// A member that stops answering (SIGSTOP) keeps its connection, and the
// client sends every third call to it until its keepalive gives up on it:
// a batch sent there waits for its deadline (its admissions fail, as
// they did one call each), but does not hold the others back for longer
// than stuckAfter: the two members that answer decide them.
func TestBatchFrozenMember(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	bs := newBatchStore(t, c, "frozen:")
	leader := c.Leader(t, 10*time.Second)
	frozen := c.Members[0]
	if frozen == leader {
		frozen = c.Members[1]
	}
	if _, err := bs.Admit(ctxTest(t), fencestore.Admission{Resource: "warm", Token: 1}); err != nil {
		t.Fatal(err)
	}
	frozen.Stop()
	defer frozen.Cont()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for w := range 8 {
		wg.Go(func() {
			for i := uint64(1); time.Now().Before(stop); i++ {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				d, err := bs.Admit(ctx, fencestore.Admission{Resource: fmt.Sprintf("r/%d", w), Token: i})
				cancel()
				switch {
				case err == nil && d.Admitted:
					ok.Add(1)
				case err == nil:
					t.Errorf("worker %d, token %d: refused %+v", w, i, d)
				default:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("with a member frozen: %d admitted, %d failed (503)", ok.Load(), failed.Load())
	if ok.Load() <= failed.Load() {
		t.Errorf("with a member frozen: %d admitted, %d failed", ok.Load(), failed.Load())
	}
}

func TestBatchHalves(t *testing.T) {
	adm := func(n int) []*queued { return make([]*queued, n) }
	rel := func(n int) []rel { return make([]rel, n) }
	for _, c := range []batch{{adms: adm(2)}, {rels: rel(2)}, {rels: rel(1), adms: adm(1)}, {rels: rel(5), adms: adm(1)},
		{rels: rel(1), adms: adm(6)}, {rels: rel(3), adms: adm(4)}} {
		a, b := c.halves()
		na, nb := len(a.rels)+len(a.adms), len(b.rels)+len(b.adms)
		n := len(c.rels) + len(c.adms)
		if na == 0 || nb == 0 || na+nb != n || len(a.rels)+len(b.rels) != len(c.rels) || (len(a.adms) > 0 && len(a.rels) != len(c.rels)) {
			t.Errorf("%d releases, %d admissions split as (%d, %d) and (%d, %d)",
				len(c.rels), len(c.adms), len(a.rels), len(a.adms), len(b.rels), len(b.adms))
		}
	}
}

// batchStore is a store whose batches are recorded: the number of
// admissions and of releases of each transaction sent.
type batchStore struct {
	*Store
	mu      sync.Mutex
	commits [][2]int
}

func newBatchStore(t *testing.T, c *etcdtest.Cluster, prefix string) *batchStore {
	bs := &batchStore{Store: New(c.Client(t), Options{KeyPrefix: prefix, Logger: zap.NewNop()})}
	bs.batch.onCommit = func(adms, rels int) {
		bs.mu.Lock()
		defer bs.mu.Unlock()
		bs.commits = append(bs.commits, [2]int{adms, rels})
	}
	t.Cleanup(func() { _ = bs.Close() })
	return bs
}

func (bs *batchStore) sent() [][2]int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return slices.Clone(bs.commits)
}

// prepared is an admission made ready for a batch by hand, as Admit does.
func (bs *batchStore) prepared(ctx context.Context, a fencestore.Admission, l *lease) *queued {
	var fl *flightReg
	if a.Flight > 0 {
		fl = &flightReg{key: flightKey(bs.keys.flightRange(a.Resource), a.Order(), fmt.Sprintf("%s.%016x", bs.replica, bs.ids.Add(1))), lease: l}
	}
	want := bs.expectation()
	return prepare(ctx, newPlan(bs.keys, a, fl, want != ""), want)
}

// One transaction decides admissions that are admitted, refused, regressed
// below their floor and on a corrupt value, and deletes a release: each
// admission gets its own decision (the corrupt one alone fails).
func TestBatchOneTransaction(t *testing.T) {
	c := etcdtest.Start(t)
	bs := newBatchStore(t, c, "one:")
	ctx := ctxTest(t)
	id, err := bs.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	bs.Expect(id)
	cl := c.Client(t)
	for res, v := range map[string]string{"stale": value(fencestore.Mark{Token: 50}), "low": value(fencestore.Mark{Token: 3}),
		"corrupt": "00000000000000000042:7"} {
		if _, err := cl.Put(ctx, "one:"+res, v); err != nil {
			t.Fatal(err)
		}
	}
	older, err := bs.Admit(ctx, fencestore.Admission{Resource: "flying", Token: 1, Flight: time.Minute})
	if err != nil || !older.Flight.Registered() {
		t.Fatalf("Admit = %+v, %v", older, err)
	}
	l, err := bs.leases.get(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	admissions := []fencestore.Admission{
		{Resource: "new", Token: 7, Flight: time.Minute},
		{Resource: "stale", Token: 49},
		{Resource: "low", Token: 4, Floor: fencestore.Mark{Token: 10}, HasFloor: true, Compare: fencestore.Greater},
		{Resource: "corrupt", Token: 41}, // below the value: never written over
		{Resource: "stale", Token: 51},   // the same resource: never in the same batch
		{Resource: "flying", Token: 2, Flight: time.Minute},
	}
	var qs []*queued
	for _, a := range admissions {
		qs = append(qs, bs.prepared(ctx, a, l))
	}
	// Sent by hand, not through the queue: the first transaction holds the
	// release and every admission but the second of "stale" (take never
	// puts two of one resource together: TestBatchTake).
	bs.batch.send(batch{rels: []rel{{key: older.Flight.Key, moot: time.Now().Add(time.Hour)}}, adms: append(slices.Clone(qs[:4]), qs[5])})
	bs.batch.send(batch{adms: qs[4:5]})
	if got := bs.sent(); !slices.Equal(got[len(got)-2:], [][2]int{{5, 1}, {1, 0}}) {
		t.Errorf("transactions sent (admissions, releases): %v", got)
	}
	for i, q := range qs {
		<-q.done
		a := admissions[i]
		d, err := bs.decide(ctx, q)
		if a.Resource == "corrupt" {
			if !errors.Is(err, fencestore.ErrUnavailable) {
				t.Errorf("on a corrupt value: %+v, %v", d, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Admit(%+v): %v", a, err)
			continue
		}
		stored := fencestore.Mark{Token: 50}
		has := a.Resource != "new"
		switch a.Resource {
		case "low":
			stored = fencestore.Mark{Token: 3}
		case "flying":
			stored = fencestore.Mark{Token: 1}
		}
		want, _, _ := a.Decide(stored, has)
		if d.Flight.Registered() != (a.Flight > 0) {
			t.Errorf("Admit(%+v): flight %+v", a, d.Flight)
		}
		if a.Resource == "flying" && d.Flight.Older {
			t.Errorf("the release before it in its batch: Older set")
		}
		if d.Generation == 0 {
			t.Errorf("Admit(%+v): no generation (the batch's revision) reported", a)
		}
		d.Flight, d.Generation = fencestore.Flight{}, 0
		if d != want {
			t.Errorf("Admit(%+v) = %+v, want %+v", a, d, want)
		}
	}
	if m, _, err := bs.Get(ctx, "low"); err != nil || m.Token != 10 {
		t.Errorf("regressed below its floor: mark %+v, %v; want the floor, 10", m, err)
	}
	if m, _, err := bs.Get(ctx, "stale"); err != nil || m.Token != 51 {
		t.Errorf("stale: mark %+v, %v; want 51", m, err)
	}
	if resp, err := cl.Get(ctx, older.Flight.Key); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the released record: %v, %v", resp, err)
	}
	if v, err := cl.Get(ctx, "one:corrupt"); err != nil || string(v.Kvs[0].Value) != "00000000000000000042:7" {
		t.Errorf("the corrupt value: %v, %v", v, err)
	}

	// Another identity: every admission of the batch is lost.
	bs.Expect("someone-else")
	lost := []*queued{bs.prepared(ctx, fencestore.Admission{Resource: "x", Token: 1}, nil),
		bs.prepared(ctx, fencestore.Admission{Resource: "y", Token: 1}, nil)}
	bs.batch.send(batch{adms: lost})
	for _, q := range lost {
		var le *fencestore.LostError
		if _, err := bs.decide(ctx, q); !errors.As(err, &le) || le.Found != id {
			t.Errorf("under another identity: %v", err)
		}
	}
}

// A lease that etcd does not have fails the whole transaction: the batch
// is split until the admission on it is alone, and the others are
// decided. Admit then takes a fresh lease and tries once more.
func TestBatchLeaseNotFound(t *testing.T) {
	c := etcdtest.Start(t)
	bs := newBatchStore(t, c, "lease:")
	ctx := ctxTest(t)
	cl := c.Client(t)
	good, err := cl.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := cl.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Revoke(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	var qs []*queued
	for i := range 5 {
		l := &lease{id: good.ID}
		if i == 3 {
			l = &lease{id: gone.ID}
		}
		qs = append(qs, bs.prepared(ctx, fencestore.Admission{Resource: fmt.Sprint(i), Token: 1, Flight: time.Minute}, l))
	}
	bs.batch.send(batch{adms: qs})
	for i, q := range qs {
		d, err := bs.decide(ctx, q)
		if i == 3 {
			if !isLeaseNotFound(err) || !errors.Is(err, fencestore.ErrUnavailable) {
				t.Errorf("on a revoked lease: %+v, %v", d, err)
			}
			continue
		}
		if err != nil || !d.Admitted || !d.Flight.Registered() {
			t.Errorf("%d: %+v, %v", i, d, err)
		}
	}
	t.Logf("transactions sent (admissions, releases): %v", bs.sent())

	// Through Admit: the store's own lease revoked under it.
	d, err := bs.Admit(ctx, fencestore.Admission{Resource: "a", Token: 1, Flight: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	leaseOf := func(key string) clientv3.LeaseID {
		t.Helper()
		r, err := cl.Get(ctx, key)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("in-flight record %q: %v, %v", key, r, err)
		}
		return clientv3.LeaseID(r.Kvs[0].Lease)
	}
	revoked := leaseOf(d.Flight.Key)
	if _, err := cl.Revoke(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	d, err = bs.Admit(ctx, fencestore.Admission{Resource: "a", Token: 2, Flight: time.Minute})
	if err != nil || !d.Admitted {
		t.Fatalf("after its lease was revoked: %+v, %v", d, err)
	}
	if l := leaseOf(d.Flight.Key); l == revoked {
		t.Fatalf("after its lease was revoked: the record is on the revoked lease %x", l)
	}
}

// A member whose --max-txn-ops is below the default refuses a wide batch,
// untouched: the batch is split, every admission decided, and later
// batches stay narrower.
func TestBatchTooWide(t *testing.T) {
	c := etcdtest.Start(t, "--max-txn-ops=16")
	bs := newBatchStore(t, c, "wide:")
	ctx := ctxTest(t)
	l, err := bs.leases.get(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var qs []*queued
	for i := range 20 {
		qs = append(qs, bs.prepared(ctx, fencestore.Admission{Resource: fmt.Sprint(i), Token: 1, Flight: time.Minute}, l))
	}
	bs.batch.send(batch{adms: qs})
	for i, q := range qs {
		if d, err := bs.decide(ctx, q); err != nil || !d.Admitted {
			t.Errorf("%d: %+v, %v", i, d, err)
		}
	}
	bs.batch.mu.Lock()
	maxOps := bs.batch.maxOps
	bs.batch.mu.Unlock()
	if maxOps > 16 {
		t.Errorf("maxOps %d after a refusal at 16", maxOps)
	}
	t.Logf("transactions sent (admissions, releases): %v; maxOps now %d", bs.sent(), maxOps)
}

// An admission whose caller gave up before its batch left is not sent.
func TestBatchGaveUp(t *testing.T) {
	c := etcdtest.Start(t)
	bs := newBatchStore(t, c, "gone:")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	q := bs.prepared(ctx, fencestore.Admission{Resource: "r", Token: 1}, nil)
	bs.batch.send(batch{adms: []*queued{q}})
	if _, err := bs.decide(ctxTest(t), q); !errors.Is(err, context.Canceled) {
		t.Errorf("decide = %v", err)
	}
	if n := len(bs.sent()); n != 0 {
		t.Errorf("%d transactions sent", n)
	}
	if _, ok, err := bs.Get(ctxTest(t), "r"); ok || err != nil {
		t.Errorf("mark %v, %v", ok, err)
	}
}

// Many callers on a few shared resources and many of their own: every
// decision is one that some order of the admissions explains per resource
// (the mark never moves backward, and ends at the greatest token
// admitted), and batches form. The sizes of the batches are logged.
func TestBatchConcurrent(t *testing.T) {
	c := etcdtest.Start(t)
	bs := newBatchStore(t, c, "conc:")
	ctx := ctxTest(t)
	const workers, each = 48, 40
	type result struct {
		res   string
		token uint64
		d     fencestore.Decision
	}
	results := make(chan result, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				res := fmt.Sprintf("own/%d", w)
				if i%2 == 0 {
					res = fmt.Sprintf("shared/%d", i%3)
				}
				a := fencestore.Admission{Resource: res, Token: uint64(i*workers + w + 1), Compare: fencestore.Greater}
				if w%2 == 0 {
					a.Flight = time.Minute
				}
				d, err := bs.Admit(ctx, a)
				if err != nil {
					t.Errorf("Admit(%+v): %v", a, err)
					return
				}
				bs.Release(d.Flight)
				results <- result{res, a.Token, d}
			}
		})
	}
	wg.Wait()
	close(results)
	greatest := map[string]uint64{}
	for r := range results {
		switch {
		case r.d.Admitted && r.d.Mark != r.token:
			t.Errorf("%s: %d admitted with mark %d", r.res, r.token, r.d.Mark)
		case !r.d.Admitted && r.d.Mark < r.token:
			t.Errorf("%s: %d refused by mark %d", r.res, r.token, r.d.Mark)
		case r.d.Admitted:
			greatest[r.res] = max(greatest[r.res], r.token)
		}
	}
	for res, g := range greatest {
		if m, _, err := bs.Get(ctx, res); err != nil || m.Token != g {
			t.Errorf("%s: mark %d, %v; the greatest token admitted is %d", res, m.Token, err, g)
		}
	}
	sizes := map[int]int{}
	most := 0
	for _, sent := range bs.sent() {
		sizes[sent[0]]++
		most = max(most, sent[0])
	}
	t.Logf("admissions per transaction: count by size %v", sizes)
	if most < 2 {
		t.Errorf("no batch held two admissions: %v", sizes)
	}
}
