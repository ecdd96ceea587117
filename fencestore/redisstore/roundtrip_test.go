package redisstore

import (
	"fmt"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// OnRoundTrip learns of every admission's round trip, batched or not.
func TestOnRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	for _, maxBatch := range []int{0, -1} {
		t.Run(fmt.Sprint("MaxBatch=", maxBatch), func(t *testing.T) {
			var r storetest.RoundTrips
			s := New(srv.Client(t), Options{KeyPrefix: fmt.Sprintf("fence:rt%d:", maxBatch), MaxBatch: maxBatch, OnRoundTrip: r.Observe})
			defer s.Close()
			storetest.CheckRoundTrips(t.Context(), t, s, &r, 40, maxBatch < 0)
		})
	}
}
