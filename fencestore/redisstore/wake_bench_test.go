package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// BenchmarkWakeAcrossReplicas is the wake-up the release linger costs a
// waiter on another replica: replica A admits 41, replica B admits 42 (which
// waits for 41) and drains, and A releases 41 with nothing else to send;
// the figure is the time from A's Release call to B's Drain returning, its
// median and 90th percentile (wake-p50-µs, wake-p90-µs), with the linger
// as shipped (DefaultReleaseLinger) and with none (ReleaseLinger -1). A
// waiter of the releasing process does not pay the linger (a release it
// waits for goes at once). Reported, never asserted:
//
//	go test -run '^$' -bench WakeAcrossReplicas -benchtime 300x ./fencestore/redisstore/
func BenchmarkWakeAcrossReplicas(b *testing.B) {
	srv := redistest.Start(b)
	for _, tc := range []struct {
		name   string
		linger time.Duration
	}{{"linger=default", 0}, {"linger=none", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			_, prefix := newStore(b, srv, redisstore.Options{})
			opts := redisstore.Options{KeyPrefix: prefix, ReleaseLinger: tc.linger}
			a := redisstore.New(redis.NewClient(srv.Options()), opts)
			r := redisstore.New(redis.NewClient(srv.Options()), opts)
			b.Cleanup(func() { _ = a.Close(); _ = r.Close() })
			ctx := context.Background()
			admit := func(s *redisstore.Store, token uint64) fencestore.Flight {
				d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: token, Flight: time.Minute})
				if err != nil || !d.Admitted {
					b.Fatalf("Admit(%d) = %+v, %v", token, d, err)
				}
				return d.Flight
			}
			waits := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				older := admit(a, uint64(2*i+1))
				newer := admit(r, uint64(2*i+2))
				if !newer.Older {
					b.Fatal("the newer request does not see the older one in flight")
				}
				done := make(chan time.Time, 1)
				go func() {
					if _, err := r.Drain(ctx, newer); err != nil {
						b.Error(err)
					}
					done <- time.Now()
				}()
				time.Sleep(2 * time.Millisecond) // the Drain registered
				start := time.Now()
				a.Release(older)
				waits = append(waits, (<-done).Sub(start))
				r.Release(newer)
			}
			b.StopTimer()
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "wake-p50-µs")
			b.ReportMetric(float64(waits[len(waits)*9/10].Microseconds()), "wake-p90-µs")
		})
	}
}
