package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// The generation on a Cluster, one per slot: the slot of gen/4 set back
// (as a master restored from an older RDB holds it) fails its admissions
// with a rollback, and the generation a replica passes is its slot's.
func TestClusterGeneration(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var s *Store
	storetest.RunGeneration(t, func(t *testing.T) storetest.KeeperStore {
		s = New(c.Client(t), Options{KeyPrefix: "fence:"})
		return s
	}, func(t *testing.T, _ storetest.KeeperStore, to uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gkey := s.records.generation(keySlot("fence:gen/4"))
		if err := c.Client(t).HSet(ctx, gkey, "g", to).Err(); err != nil {
			t.Fatal(err)
		}
	})
}
