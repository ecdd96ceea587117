package proxy

import (
	"context"
	"fmt"
	"net/http"
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

// The cache is bounded: a full shard forgets an entry to take a new one,
// and a lower mark never replaces a higher one.
func TestMarkCacheBounded(t *testing.T) {
	c := newMarkCache(markShards) // one entry per shard
	for i := range 1000 {
		c.see(fmt.Sprint("r", i), fencestore.Mark{Token: uint64(i)})
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > markShards {
		t.Fatalf("%d entries in a cache of %d", n, markShards)
	}
	c.see("x", fencestore.Mark{Token: 9})
	c.see("x", fencestore.Mark{Token: 3})
	if m, ok := c.get("x"); !ok || m.Token != 9 {
		t.Fatalf("x = %+v %v, want 9", m, ok)
	}
	if newMarkCache(0) != nil {
		t.Fatal("FENCE_MARK_CACHE=0 made a cache")
	}
}
