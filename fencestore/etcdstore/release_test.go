package etcdstore

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// A replica that closes sends the releases it still owes: here one held
// back by a release backoff (as after a failed attempt) when Close comes.
func TestCloseFlushesReleases(t *testing.T) {
	c := etcdtest.Start(t)
	cl := c.Client(t)
	s := New(c.Client(t), Options{KeyPrefix: "flush:"})
	ctx := ctxTest(t)
	d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 1, Flight: time.Minute})
	if err != nil || !d.Flight.Registered() {
		t.Fatalf("Admit = %+v, %v", d, err)
	}
	s.batch.mu.Lock()
	s.batch.relsAfter = time.Now().Add(time.Hour)
	s.batch.mu.Unlock()
	s.Release(d.Flight)
	if resp, err := cl.Get(ctx, d.Flight.Key); err != nil || resp.Count != 1 {
		t.Fatalf("record before Close: %v, %v; want it still there (its release waits out the backoff)", resp, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, err := cl.Get(ctx, "flush:\x00inflight/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("in-flight records after Close: %v, %v; want none", resp, err)
	}
}

// A full release queue makes room by dropping the release queued first
// and still queued: one sent since, or queued again later, keeps its
// place (it is not the oldest any more).
func TestReleaseQueueDropsOldest(t *testing.T) {
	b := &batcher{rels: make(map[string]time.Time), log: zap.NewNop()}
	b.relMax = 3
	later := time.Now().Add(time.Hour)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range []string{"a", "b", "c"} {
		b.queueRel(k, later)
	}
	b.unqueueRel("a")      // taken by a batch
	b.queueRel("b", later) // queued again: keeps its place
	b.queueRel("a", later) // back after a failure: queued last now
	b.queueRel("d", later) // full: b goes
	b.queueRel("e", later) // full: c goes
	for _, tc := range []struct {
		key    string
		queued bool
	}{{"a", true}, {"b", false}, {"c", false}, {"d", true}, {"e", true}} {
		if _, ok := b.rels[tc.key]; ok != tc.queued {
			t.Errorf("%s queued = %v, want %v (queue %v)", tc.key, ok, tc.queued, b.rels)
		}
	}
	if b.relq.Len() != len(b.rels) {
		t.Errorf("%d keys in the order for %d queued", b.relq.Len(), len(b.rels))
	}
	if b.droppedTotal != 2 {
		t.Errorf("dropped %d, want 2", b.droppedTotal)
	}
	// A batch takes them all; the queue fills again from empty, and the
	// first queued now is the first dropped (a place the batch left behind
	// would make room for nothing).
	b.maxOps, b.maxBytes = defaultMaxTxnOps, maxBatchBytes
	if got := b.take(); len(got.rels) != 3 || len(b.rels) != 0 || b.relq.Len() != 0 {
		t.Fatalf("take: %d releases, %d left, %d in the order", len(got.rels), len(b.rels), b.relq.Len())
	}
	for _, k := range []string{"w", "x", "y", "z"} {
		b.queueRel(k, later)
	}
	if _, ok := b.rels["w"]; ok || len(b.rels) != 3 || b.droppedTotal != 3 {
		t.Errorf("after a batch, 4 queued in 3 places: %v, %d dropped; want w dropped", b.rels, b.droppedTotal)
	}
}
