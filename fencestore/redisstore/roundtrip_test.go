package redisstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// OnRoundTrip learns of every admission's round trip, batched or not:
// the admissions it reports add up to those made.
func TestOnRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	for _, maxBatch := range []int{0, -1} {
		t.Run(fmt.Sprint("MaxBatch=", maxBatch), func(t *testing.T) {
			var trips, admissions atomic.Int64
			s := New(srv.Client(t), Options{KeyPrefix: fmt.Sprintf("fence:rt%d:", maxBatch), MaxBatch: maxBatch,
				OnRoundTrip: func(rt fencestore.RoundTrip) {
					trips.Add(1)
					admissions.Add(int64(rt.Admissions))
					if rt.Duration <= 0 || rt.Failed {
						t.Errorf("round trip %+v", rt)
					}
				}})
			defer s.Close()
			const n = 40
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if _, err := s.Admit(t.Context(), fencestore.Admission{Resource: fmt.Sprint("r", i%5), Token: uint64(i), Compare: fencestore.AtLeast}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if admissions.Load() != n || trips.Load() < 1 || (maxBatch < 0 && trips.Load() != n) {
				t.Errorf("%d admissions reported in %d round trips, want %d", admissions.Load(), trips.Load(), n)
			}
		})
	}
}
