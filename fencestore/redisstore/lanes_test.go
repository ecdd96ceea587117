package redisstore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestLaneMerge: a lane's next pipeline takes whole parts of its backlog
// in order, up to maxBatch admissions (always the first part, however
// large), carries each release once, owned when any part that carried it
// owns it, and leaves the rest of the backlog for the pipeline after.
func TestLaneMerge(t *testing.T) {
	node := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer node.Close()
	adm := func(n int) []*admission {
		out := make([]*admission, n)
		for i := range out {
			out[i] = &admission{}
		}
		return out
	}
	r1, r2, r3 := release{"k1", "m1"}, release{"k2", "m2"}, release{"k3", "m3"}
	p1 := &part{node: node, live: adm(3), rels: []release{r1, r2}, owned: []bool{false, true}}
	p2 := &part{node: node, live: adm(2), rels: []release{r1, r3}, owned: []bool{true, false}}
	p3 := &part{node: node, live: adm(4), rels: []release{r2}, owned: []bool{false}}
	var l lanes
	l.m = map[*redis.Client]*lane{node: {busy: 1, backlog: []*part{p1, p2, p3}}}

	got := l.next(node, 6)
	if got == nil || len(got.live) != 5 {
		t.Fatalf("first pipeline: %+v; want parts 1 and 2 (5 admissions; the third would make 9 > 6)", got)
	}
	if !slices.Equal(got.rels, []release{r1, r2, r3}) || !slices.Equal(got.owned, []bool{true, true, false}) {
		t.Errorf("releases %v owned %v; want r1 r2 r3 once each, owned true true false", got.rels, got.owned)
	}
	if !slices.Equal(got.live, append(append([]*admission{}, p1.live...), p2.live...)) {
		t.Error("admissions not in queue order")
	}
	got = l.next(node, 1)
	if got == nil || len(got.live) != 4 || !slices.Equal(got.rels, []release{r2}) || !slices.Equal(got.owned, []bool{false}) {
		t.Fatalf("second pipeline: %+v; want part 3 whole (a first part is taken however large)", got)
	}
	if got = l.next(node, 6); got != nil {
		t.Fatalf("third pipeline: %+v; want none", got)
	}
	if _, ok := l.m[node]; ok {
		t.Error("an idle lane is kept")
	}
}

// TestLaneBacklogPrunes: a part that joins a lane's backlog while its
// master is silent first drops the admissions whose callers gave up
// (answered errNotSent, as never sent) and the parts left without any;
// their releases ride on with the next pipeline, each once, owned when any
// dropped copy was. So a silent master's backlog holds no more admissions
// than callers still wait, whatever the rate.
func TestLaneBacklogPrunes(t *testing.T) {
	node := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer node.Close()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	adm := func(ctx context.Context) *admission {
		return &admission{ctx: ctx, done: make(chan struct{}, 1)}
	}
	b := &batcher{pipelines: 1}
	b.lanes.m = map[*redis.Client]*lane{node: {busy: 1}} // its one pipeline in flight
	r1, r2 := release{"k1", "m1"}, release{"k2", "m2"}

	// 1,000 batches for the silent master, each an admission already given
	// up and a copy of r1 (owned by one of them).
	var dropped []*admission
	for i := range 1000 {
		a := adm(gone)
		dropped = append(dropped, a)
		b.lanes.submit(b, &part{node: node, live: []*admission{a}, rels: []release{r1}, owned: []bool{i == 500}})
		if n := len(b.lanes.m[node].backlog); n > 2 {
			t.Fatalf("after %d parts the backlog holds %d parts; want at most 2 (the releases and the newest)", i+1, n)
		}
	}
	for i, a := range dropped[:999] { // the newest is not pruned yet
		select {
		case <-a.done:
			var notSent errNotSent
			if !errors.As(a.err, &notSent) {
				t.Fatalf("admission %d answered %v; want errNotSent", i, a.err)
			}
		default:
			t.Fatalf("admission %d, given up, is still held", i)
		}
	}

	// One caller still waits: its part stays, and the dropped parts'
	// releases ride ahead of its admission.
	waiting := adm(context.Background())
	b.lanes.submit(b, &part{node: node, live: []*admission{waiting}, rels: []release{r2}, owned: []bool{false}})
	p := b.lanes.next(node, 10)
	if p == nil || !slices.Equal(p.live, []*admission{waiting}) {
		t.Fatalf("next pipeline %+v; want the one waiting admission alone", p)
	}
	if !slices.Equal(p.rels, []release{r1, r2}) || !slices.Equal(p.owned, []bool{true, false}) {
		t.Errorf("releases %v owned %v; want r1 (owned: one dropped copy was) then r2, once each", p.rels, p.owned)
	}
	select {
	case <-waiting.done:
		t.Error("the waiting admission was answered without being sent")
	default:
	}
	if p = b.lanes.next(node, 10); p != nil {
		t.Fatalf("then %+v; want none", p)
	}
}
