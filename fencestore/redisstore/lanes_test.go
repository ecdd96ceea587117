package redisstore

import (
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
