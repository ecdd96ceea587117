package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// FENCE_REDIS_URL pointing at a replica: fenced requests get 503
// store-unavailable whose detail names the role, and nothing is forwarded,
// whatever the admission would have decided (a stale token, an equal one,
// a newer one); Redis refuses the admission script on a replica.
func TestRedisReplicaRefused(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	up := newCountingUpstream(t)
	onMaster := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": master.URL()})
	if a := put(t, onMaster.data, "/x", "42"); a.status != 200 {
		t.Fatalf("42 through the master: %+v", a)
	}
	redistest.Poll(t, 5*time.Second, "the mark replicated", func() error {
		return redistest.WaitAcks(master.Addr())
	})
	p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": replica.URL()})
	before := up.n.Load()
	for _, token := range []string{"41", "42", "43"} {
		a := put(t, p.data, "/x", token)
		detail, _ := a.problem["detail"].(string)
		if a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-unavailable" || !strings.Contains(detail, "replica") {
			t.Errorf("token %s through a replica: %+v; want 503 store-unavailable naming the role", token, a)
		}
	}
	if n := up.n.Load() - before; n != 0 {
		t.Errorf("%d requests forwarded through a replica", n)
	}
}
