package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// BenchmarkBarrierContention: 1, 10 and 100 writers contend on one
// resource through one replica, each with a new token per request (">="),
// the barrier on: admit, Drain when an older request is in flight, hold
// the "upstream" for 2ms, release. It reports the replica's calls to etcd
// (transactions, reads, lease grants, watch creations) per admitted
// request (rtt/admitted) and per admission, refused ones included
// (rtt/attempt: under contention a token taken before a greater one was
// admitted is refused), the share of admitted requests that waited, and
// of those that found an older one abandoned (none should).
// Run with a count of requests, e.g.
//
//	go test -run '^$' -bench BarrierContention -benchtime 400x ./fencestore/etcdstore/
func BenchmarkBarrierContention(b *testing.B) {
	c := etcdtest.Start(b)
	var runs atomic.Int64 // each run on a resource of its own
	for _, writers := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			var rpcs rpcCount
			s := etcdstore.New(countingClient(b, &rpcs, c.Endpoints()...), etcdstore.Options{KeyPrefix: fmt.Sprintf("contend%d:", runs.Add(1))})
			defer s.Close()
			ctx := context.Background()
			var token, admitted, waited, refused, expired atomic.Int64
			var wg sync.WaitGroup
			before := rpcs.Total()
			b.ResetTimer()
			for range writers {
				wg.Go(func() {
					for admitted.Load() < int64(b.N) {
						d, err := s.Admit(ctx, fencestore.Admission{Resource: "hot", Token: uint64(token.Add(1)), Flight: 30 * time.Second})
						if err != nil {
							b.Error(err)
							return
						}
						if !d.Admitted {
							refused.Add(1)
							continue
						}
						admitted.Add(1)
						if d.Flight.Older {
							waited.Add(1)
							exp, err := s.Drain(ctx, d.Flight)
							if err != nil {
								b.Error(err)
							}
							if exp {
								expired.Add(1)
							}
						}
						time.Sleep(2 * time.Millisecond)
						s.Release(d.Flight)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			n := float64(admitted.Load())
			b.ReportMetric(float64(rpcs.Total()-before)/n, "rtt/admitted")
			b.ReportMetric(float64(rpcs.Total()-before)/(n+float64(refused.Load())), "rtt/attempt")
			b.ReportMetric(float64(waited.Load())/n, "waited/admitted")
			b.ReportMetric(float64(refused.Load())/n, "refused/admitted")
			b.ReportMetric(float64(expired.Load())/n, "abandoned/admitted")
		})
	}
}
