package proxy

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// A store that lost a mark this replica saw: the stale holder is refused
// against the remembered mark (409 with it as highWaterMark), the store's
// mark is raised back in the same admission, and the regression is counted.
// Without the cache the same loss admits the stale holder.
func TestMarkCacheHealsALostMark(t *testing.T) {
	for _, cache := range []int{100, 0} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			s := memstore.New()
			f := newFixtureWith(t, ordersRoutes, s, func(o *Options) { o.MarkCache = cache })
			if resp, _ := f.do("PUT", "/orders/9", "Fencing-Token", "42"); resp.StatusCode != 200 {
				t.Fatalf("42: %d", resp.StatusCode)
			}
			// The store forgets the mark (a crash before fsync, a failover).
			if _, _, err := s.Reset(context.Background(), "orders/9", nil); err != nil {
				t.Fatal(err)
			}
			resp, body := f.do("PUT", "/orders/9", "Fencing-Token", "41")
			regressions := testutil.ToFloat64(f.metrics.regressions.WithLabelValues("order-writes"))
			m, ok, _ := s.Get(context.Background(), "orders/9")
			if cache == 0 {
				if resp.StatusCode != http.StatusOK || regressions != 0 {
					t.Fatalf("without the cache: 41 got %d (regressions %v); the loss should have gone unnoticed", resp.StatusCode, regressions)
				}
				return
			}
			p := decodeProblem(t, resp, body)
			if resp.StatusCode != http.StatusConflict || p.HighWaterMark != "42" || !strings.Contains(p.Type, "stale-token") {
				t.Fatalf("41 after the loss: %d %+v", resp.StatusCode, p)
			}
			if regressions != 1 || !ok || m != (fencestore.Mark{Token: 42}) {
				t.Fatalf("regressions %v, store mark %+v %v; want 1 and healed to 42", regressions, m, ok)
			}
			if resp, _ := f.do("PUT", "/orders/9", "Fencing-Token", "43"); resp.StatusCode != 200 {
				t.Fatalf("43 after healing: %d", resp.StatusCode)
			}
		})
	}
}

// The cache is bounded by its size, with every resource of a full cache
// remembered (no shard overflows for the unevenness of hashing); it
// forgets the resource least recently admitted; refusals never add a
// resource, so a flood of refused names evicts nothing, and a hot resource
// admitted between a flood of admitted names keeps its floor.
func TestMarkCacheBounded(t *testing.T) {
	const size = 100000
	c := newMarkCache(size)
	for i := range size {
		c.admitted(fmt.Sprint("r", i), fencestore.Mark{Token: uint64(i)}, 1, false)
	}
	for i := range size {
		if _, _, ok := c.get(fmt.Sprint("r", i)); !ok {
			t.Fatalf("r%d forgotten in a cache of %d holding %d resources", i, size, size)
		}
	}

	small := newMarkCache(640)
	small.admitted("hot", fencestore.Mark{Token: 7}, 1, false)
	for i := range 100000 {
		small.refused(fmt.Sprint("invented", i), fencestore.Mark{Token: 1}, 1, false)
	}
	if _, _, ok := small.get("invented5"); ok {
		t.Fatal("a refused name was added")
	}
	for i := range 100000 {
		small.admitted(fmt.Sprint("new", i), fencestore.Mark{Token: 1}, 1, false)
		if i%50 == 0 {
			small.admitted("hot", fencestore.Mark{Token: 7}, 1, false)
		}
	}
	if m, _, ok := small.get("hot"); !ok || m.Token != 7 {
		t.Fatalf("hot = %+v %v after a flood of admitted names, want 7 kept", m, ok)
	}
	n := 0
	for i := range small.shards {
		sh := &small.shards[i]
		if len(sh.index) != len(sh.slots) {
			t.Fatalf("shard %d: %d names indexed, %d slots", i, len(sh.index), len(sh.slots))
		}
		n += len(sh.slots)
	}
	if n > 640+640/4+markShards*9 {
		t.Fatalf("%d entries in a cache of 640", n)
	}

	if newMarkCache(0) != nil {
		t.Fatal("FENCE_MARK_CACHE=0 made a cache")
	}
}

// The generation moves only together with the mark it was seen with: a
// lower mark never replaces a higher one (nor its generation), except for
// an operator's change no older than the remembered mark; an equal mark
// seen later carries the later generation.
func TestMarkCacheGeneration(t *testing.T) {
	type put struct {
		token, gen     uint64
		replace, admit bool
	}
	tests := []struct {
		name       string
		puts       []put
		token, gen uint64 // remembered at the end
	}{
		{"a higher mark with its generation", []put{{9, 3, false, true}, {12, 5, false, true}}, 12, 5},
		{"a lower mark refused: neither moves", []put{{9, 3, false, true}, {3, 4, false, false}}, 9, 3},
		{"a lower mark admitted: neither moves", []put{{9, 3, false, true}, {3, 4, false, true}}, 9, 3},
		{"the same mark seen later", []put{{9, 3, false, true}, {9, 6, false, false}}, 9, 6},
		{"the same mark seen earlier", []put{{9, 6, false, true}, {9, 3, false, true}}, 9, 6},
		{"an operator's change replaces a higher mark", []put{{9, 3, false, true}, {3, 5, true, true}}, 3, 5},
		{"a late write from before the change keeps its generation", []put{
			{9, 3, false, true}, {3, 5, true, true}, {9, 3, false, true}}, 9, 3},
		{"a late refusal from before the change too", []put{
			{9, 3, false, true}, {3, 5, true, true}, {9, 4, false, false}}, 9, 4},
		{"an older operator's change does not replace a newer mark", []put{
			{3, 5, true, true}, {7, 8, false, true}, {2, 6, true, true}}, 7, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newMarkCache(10)
			for _, p := range tc.puts {
				m := fencestore.Mark{Token: p.token}
				if p.admit {
					c.admitted("x", m, p.gen, p.replace)
				} else {
					c.refused("x", m, p.gen, p.replace)
				}
			}
			if m, gen, ok := c.get("x"); !ok || m.Token != tc.token || gen != tc.gen {
				t.Fatalf("x = %d at %d, %v; want %d at %d", m.Token, gen, ok, tc.token, tc.gen)
			}
		})
	}
}

// A replica's cache write that lands after an operator's reset (the
// admission was answered before the reset, its handler remembers the mark
// after the next admission already remembered the reset's outcome) does
// not undo the reset: the late mark keeps its old generation, the store
// sets it aside, and the next token above the reset is admitted, the
// store's mark not raised back.
func TestMarkCacheLateWriteAfterReset(t *testing.T) {
	ctx := context.Background()
	s, f := cachingFixture(t)
	p := f.proxy
	if resp, _ := f.do("PUT", "/orders/9", "Fencing-Token", "615"); resp.StatusCode != 200 {
		t.Fatalf("615: %d", resp.StatusCode)
	}
	late, lateGen, ok := p.marks.get("orders/9")
	if !ok || late.Token != 615 {
		t.Fatalf("remembered %+v %v after 615", late, ok)
	}
	if _, _, err := s.Reset(ctx, "orders/9", &fencestore.Mark{Token: 100}); err != nil {
		t.Fatal(err)
	}
	if resp, body := f.do("PUT", "/orders/9", "Fencing-Token", "101"); resp.StatusCode != 200 {
		t.Fatalf("101 after a reset to 100: %d %s", resp.StatusCode, body)
	}
	// The write of an admission answered before the reset, late.
	p.marks.admitted("orders/9", late, lateGen, false)

	if resp, body := f.do("PUT", "/orders/9", "Fencing-Token", "102"); resp.StatusCode != 200 {
		t.Fatalf("102 after the late write: %d %s; the reset was undone", resp.StatusCode, body)
	}
	if m, _, _ := s.Get(ctx, "orders/9"); m.Token != 102 {
		t.Fatalf("store mark %+v, want 102 (not raised back to 615)", m)
	}
	if m, _, _ := p.marks.get("orders/9"); m.Token != 102 {
		t.Fatalf("remembered %+v, want the store's 102 in place of the late 615", m)
	}
}

// cachingFixture is a proxy with a mark cache on a memory store whose
// identity it expects, as a running replica's.
func cachingFixture(t *testing.T) (*memstore.Store, *fixture) {
	t.Helper()
	s := memstore.New()
	id, err := s.Init(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	return s, newFixtureWith(t, ordersRoutes, s, func(o *Options) { o.MarkCache = 100 })
}

// An operator's reset is authoritative over the remembered mark: after
// 615 was admitted and the mark reset to 100, token 101 is admitted (the
// store sets the floor of 615 aside, and the cache takes 101 in its
// place), and 100 is then refused against 101, not 615. A lost mark still
// heals (the first test).
func TestMarkCacheRespectsOperatorReset(t *testing.T) {
	ctx := context.Background()
	s, f := cachingFixture(t)
	if resp, _ := f.do("PUT", "/orders/9", "Fencing-Token", "615"); resp.StatusCode != 200 {
		t.Fatalf("615: %d", resp.StatusCode)
	}
	if _, _, err := s.Reset(ctx, "orders/9", &fencestore.Mark{Token: 100}); err != nil {
		t.Fatal(err)
	}
	if resp, body := f.do("PUT", "/orders/9", "Fencing-Token", "101"); resp.StatusCode != 200 {
		t.Fatalf("101 after a reset to 100: %d %s", resp.StatusCode, body)
	}
	resp, body := f.do("PUT", "/orders/9", "Fencing-Token", "100")
	if p := decodeProblem(t, resp, body); resp.StatusCode != http.StatusConflict || p.HighWaterMark != "101" {
		t.Fatalf("100 after 101: %d %+v, want 409 against 101", resp.StatusCode, p)
	}
	if m, _, _ := s.Get(ctx, "orders/9"); m.Token != 101 {
		t.Fatalf("store mark %+v, want 101 (not raised back)", m)
	}
}

// Within a shard: the least recently admitted is forgotten first, a
// refusal does not make a resource recent, and two names of the same hash
// never answer for each other (the later admission takes the slot).
func TestMarkShardOrder(t *testing.T) {
	type op struct {
		do       string // admit, refuse, or get (want: remembered with token)
		resource string
		hash     uint64
		token    uint64
		want     bool
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"least recent forgotten", []op{
			{"admit", "a", 1, 1, false}, {"admit", "b", 2, 1, false}, {"admit", "c", 3, 1, false},
			{"admit", "d", 4, 1, false},
			{"get", "a", 1, 0, false}, {"get", "b", 2, 1, true}, {"get", "d", 4, 1, true},
		}},
		{"an admission makes it recent", []op{
			{"admit", "a", 1, 1, false}, {"admit", "b", 2, 1, false}, {"admit", "c", 3, 1, false},
			{"admit", "a", 1, 2, false}, {"admit", "d", 4, 1, false},
			{"get", "a", 1, 2, true}, {"get", "b", 2, 0, false}, {"get", "c", 3, 1, true},
		}},
		{"a refusal does not", []op{
			{"admit", "a", 1, 1, false}, {"admit", "b", 2, 1, false}, {"admit", "c", 3, 1, false},
			{"refuse", "a", 1, 5, false}, {"admit", "d", 4, 1, false}, {"admit", "e", 5, 1, false},
			{"get", "a", 1, 0, false}, {"get", "b", 2, 0, false}, {"get", "c", 3, 1, true}, {"get", "e", 5, 1, true},
		}},
		{"same hash, other name", []op{
			{"admit", "x", 9, 7, false}, {"get", "y", 9, 0, false},
			{"refuse", "y", 9, 8, false}, {"get", "x", 9, 7, true}, {"get", "y", 9, 0, false},
			{"admit", "y", 9, 3, false}, {"get", "x", 9, 0, false}, {"get", "y", 9, 3, true},
		}},
		{"slots reused after eviction", []op{
			{"admit", "a", 1, 1, false}, {"admit", "b", 2, 1, false}, {"admit", "c", 3, 1, false},
			{"admit", "d", 4, 1, false}, {"admit", "e", 5, 1, false}, {"admit", "f", 6, 1, false},
			{"admit", "d", 4, 2, false}, {"admit", "g", 7, 1, false}, {"admit", "h", 8, 1, false},
			{"get", "d", 4, 2, true}, {"get", "g", 7, 1, true}, {"get", "h", 8, 1, true},
			{"get", "e", 5, 0, false}, {"get", "f", 6, 0, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := markShard{index: map[uint64]int32{}, head: noSlot, tail: noSlot}
			for i, o := range tc.ops {
				switch o.do {
				case "admit", "refuse":
					s.put(o.resource, o.hash, 3, fencestore.Mark{Token: o.token}, 1, false, o.do == "admit")
				case "get":
					m, _, ok := s.get(o.resource, o.hash)
					if ok != o.want || (ok && m.Token != o.token) {
						t.Fatalf("op %d: %s = %d %v, want %d %v", i, o.resource, m.Token, ok, o.token, o.want)
					}
				}
				if len(s.slots) > 3 || len(s.index) != len(s.slots) {
					t.Fatalf("op %d: %d slots, %d indexed (at most 3)", i, len(s.slots), len(s.index))
				}
			}
		})
	}
}

// BenchmarkMarkCacheFull fills a cache of FENCE_MARK_CACHE's default and
// reports its heap per resource and what one full collection costs with it
// live (the collector marks it in every cycle). Reported, never asserted.
//
//	go test -run '^$' -bench BenchmarkMarkCacheFull -benchtime 20x ./proxy
func BenchmarkMarkCacheFull(b *testing.B) {
	const size = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := newMarkCache(size)
	for i := range size {
		c.admitted(fmt.Sprintf("orders/%d", i), fencestore.Mark{Token: uint64(i)}, 1, false)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(c)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/size, "heap-B/resource")
}
