package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The ring keeps the last refusals, newest first, and never more than its
// size.
func TestRecentRefusals(t *testing.T) {
	var r recentRefusals
	if got := r.list(); len(got) != 0 {
		t.Fatalf("empty ring lists %v", got)
	}
	for i := range recentSize + 7 {
		r.add(Refusal{Token: fmt.Sprint(i)})
	}
	got := r.list()
	if len(got) != recentSize || got[0].Token != fmt.Sprint(recentSize+6) || got[recentSize-1].Token != "7" {
		t.Fatalf("ring: %d entries, first %s, last %s", len(got), got[0].Token, got[len(got)-1].Token)
	}
}

// Space-saving: the resources refused most are found however many others
// pass through, and the count of a tracked one is never below its truth.
func TestContestedResources(t *testing.T) {
	var c contestedResources
	now := time.Now()
	for i := range 1000 {
		c.add("r", fmt.Sprintf("noise/%d", i), "1", now) // each once
		if i%10 == 0 {
			c.add("r", "hot/a", "9", now) // 100 times
		}
		if i%20 == 0 {
			c.add("r", "hot/b", "7", now) // 50 times
		}
	}
	top := c.top(2)
	if len(top) != 2 || top[0].Resource != "hot/a" || top[1].Resource != "hot/b" {
		t.Fatalf("top 2 = %+v", top)
	}
	if top[0].Stale < 100 || top[1].Stale < 50 || top[0].Mark != "9" {
		t.Errorf("counts below the truth or mark lost: %+v", top)
	}
	if len(c.order) > contestedSize {
		t.Errorf("%d entries tracked, bound %d", len(c.order), contestedSize)
	}
}

// The space-saving guarantees hold on every kind of stream, after every
// refusal: the counts add up to the refusals, a tracked count is never
// below its truth nor above it by more than the least count, every
// resource refused more than N/contestedSize times is tracked, and the
// entries stay in order of their counts with their positions indexed.
func TestContestedResourcesGuarantees(t *testing.T) {
	tests := []struct {
		name string
		next func(r *rand.Rand, i int) string
	}{
		{"few resources", func(r *rand.Rand, _ int) string { return fmt.Sprint("r", r.IntN(50)) }},
		{"uniform over many", func(r *rand.Rand, _ int) string { return fmt.Sprint("r", r.IntN(5000)) }},
		{"skewed", func(r *rand.Rand, _ int) string { return fmt.Sprint("r", int(1/(r.Float64()+1e-3))) }},
		{"hot among noise", func(r *rand.Rand, i int) string {
			if i%7 == 0 {
				return "hot"
			}
			return fmt.Sprint("noise", i)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c contestedResources
			truth := map[string]uint64{}
			r := rand.New(rand.NewPCG(1, 2))
			const n = 5000
			for i := 1; i <= n; i++ {
				name := tc.next(r, i)
				truth[name]++
				c.add("r", name, "1", time.Time{})
				checkContested(t, &c, truth, uint64(i))
			}
		})
	}
}

func checkContested(t *testing.T, c *contestedResources, truth map[string]uint64, n uint64) {
	t.Helper()
	var sum uint64
	least := c.order[0].Stale
	for i, e := range c.order {
		sum += e.Stale
		if i > 0 && c.order[i-1].Stale > e.Stale {
			t.Fatalf("after %d: out of order at %d", n, i)
		}
		if c.byName[e.Resource] != i {
			t.Fatalf("after %d: %s at %d indexed at %d", n, e.Resource, i, c.byName[e.Resource])
		}
		if tr := truth[e.Resource]; e.Stale < tr || (len(c.order) == contestedSize && e.Stale > tr+least) {
			t.Fatalf("after %d: %s counted %d, truly %d, least %d", n, e.Resource, e.Stale, tr, least)
		}
	}
	if sum != n || len(c.byName) != len(c.order) || len(c.order) > contestedSize {
		t.Fatalf("after %d: counts add up to %d, %d indexed, %d tracked", n, sum, len(c.byName), len(c.order))
	}
	for name, tr := range truth {
		if _, ok := c.byName[name]; tr > n/contestedSize && !ok {
			t.Fatalf("after %d: %s refused %d times is not tracked", n, name, tr)
		}
	}
}

// Through the proxy: a refusal lands in the ring, a stale one among the
// contested, the in-flight gauge returns to 0, the upstream's answer is
// timed and classed, and a store round trip is observed.
func TestStatusMetrics(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	f.do("PUT", "/orders/1", "Fencing-Token", "5")
	f.do("PUT", "/orders/1", "Fencing-Token", "4")
	f.do("PUT", "/orders/2")
	recent := f.metrics.RecentRefusals()
	if len(recent) != 2 || recent[0].Decision != "missing" || recent[1].Decision != "stale" ||
		recent[1].Token != "4" || recent[1].Mark != "5" || recent[1].Status != http.StatusConflict {
		t.Errorf("recent refusals %+v", recent)
	}
	if c := f.metrics.MostContested(5); len(c) != 1 || c[0].Resource != "orders/1" || c[0].Stale != 1 {
		t.Errorf("contested %+v", c)
	}
	if v := testutil.ToFloat64(f.metrics.inFlight); v != 0 {
		t.Errorf("in flight %v after every request ended", v)
	}
	if v := testutil.ToFloat64(f.metrics.upstreamClass.WithLabelValues("order-writes", "2xx")); v != 1 {
		t.Errorf("2xx from the upstream counted %v, want 1", v)
	}
	if n := testutil.CollectAndCount(f.metrics.upstreamTime); n == 0 {
		t.Error("no upstream duration series")
	}
	f.metrics.ObserveRoundTrip(fencestore.RoundTrip{Admissions: 3, Releases: 1, Duration: time.Millisecond})
	want := `
# HELP fenceproxy_store_batch_size Admissions and releases one round trip to the store carried (Redis pipelines, etcd transactions).
# TYPE fenceproxy_store_batch_size histogram
fenceproxy_store_batch_size_bucket{le="1"} 0
fenceproxy_store_batch_size_bucket{le="2"} 0
fenceproxy_store_batch_size_bucket{le="4"} 1
fenceproxy_store_batch_size_bucket{le="8"} 1
fenceproxy_store_batch_size_bucket{le="16"} 1
fenceproxy_store_batch_size_bucket{le="32"} 1
fenceproxy_store_batch_size_bucket{le="64"} 1
fenceproxy_store_batch_size_bucket{le="128"} 1
fenceproxy_store_batch_size_bucket{le="256"} 1
fenceproxy_store_batch_size_bucket{le="+Inf"} 1
fenceproxy_store_batch_size_sum 4
fenceproxy_store_batch_size_count 1
`
	if err := testutil.CollectAndCompare(f.metrics.storeBatch, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
