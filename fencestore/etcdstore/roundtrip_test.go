package etcdstore_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// OnRoundTrip learns of every transaction: the admissions it reports add
// up to those made, in no more transactions than admissions.
func TestOnRoundTrip(t *testing.T) {
	c := etcdtest.Start(t)
	var trips, admissions atomic.Int64
	s := etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: "fence:rt:", OnRoundTrip: func(rt fencestore.RoundTrip) {
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
	if admissions.Load() != n || trips.Load() < 1 || trips.Load() > n {
		t.Errorf("%d admissions reported in %d transactions, want %d", admissions.Load(), trips.Load(), n)
	}
}
