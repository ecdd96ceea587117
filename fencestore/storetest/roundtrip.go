package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// RoundTrips counts what a store reports to its OnRoundTrip option; give
// its Observe method to the store.
type RoundTrips struct {
	trips, admissions atomic.Int64
	bad               atomic.Value // the first malformed report, a string
}

// Observe is the OnRoundTrip hook.
func (r *RoundTrips) Observe(rt fencestore.RoundTrip) {
	r.trips.Add(1)
	r.admissions.Add(int64(rt.Admissions))
	if rt.Duration <= 0 || rt.Failed || rt.Admissions < 0 || rt.Releases < 0 {
		r.bad.CompareAndSwap(nil, fmt.Sprintf("%+v", rt))
	}
}

// CheckRoundTrips makes n concurrent admissions on s, whose OnRoundTrip is
// r.Observe, and checks that every one was reported, in at least one and
// at most n round trips (exactly n when perAdmission: the store does not
// batch), none of them failed or empty of time.
func CheckRoundTrips(ctx context.Context, t *testing.T, s fencestore.Store, r *RoundTrips, n int, perAdmission bool) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a := fencestore.Admission{Resource: fmt.Sprint("rt", i%5), Token: uint64(i), Compare: fencestore.AtLeast}
			if _, err := s.Admit(ctx, a); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	trips, adms := r.trips.Load(), r.admissions.Load()
	if adms != int64(n) || trips < 1 || trips > int64(n) || (perAdmission && trips != int64(n)) {
		t.Errorf("%d admissions reported in %d round trips, want %d (one each: %v)", adms, trips, n, perAdmission)
	}
	if b := r.bad.Load(); b != nil {
		t.Errorf("a malformed round trip: %s", b)
	}
}
