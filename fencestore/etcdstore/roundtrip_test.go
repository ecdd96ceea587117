package etcdstore_test

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// OnRoundTrip learns of every transaction that carries admissions.
func TestOnRoundTrip(t *testing.T) {
	c := etcdtest.Start(t)
	var r storetest.RoundTrips
	s := etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: "fence:rt:", OnRoundTrip: r.Observe})
	defer s.Close()
	storetest.CheckRoundTrips(t.Context(), t, s, &r, 40, false)
}
