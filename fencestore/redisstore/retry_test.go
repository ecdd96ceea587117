package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// batchings are the two ways a store sends releases: riding group-commit
// pipelines, or each on its own.
var batchings = []struct {
	name string
	opts redisstore.Options
}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}}

// A release sent while Redis is down is sent again until Redis
// acknowledges it: once Redis is back (its AOF kept the entry), the entry
// goes without anybody waiting on it, instead of holding the next request
// of its resource until its waiters give it up.
func TestReleaseRetried(t *testing.T) {
	for _, tc := range batchings {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
			s, _ := newStore(t, srv, tc.opts)
			f := flyThrough(t, s, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute})
			srv.Kill()
			s.Release(f)
			time.Sleep(3 * time.Second) // longer than one attempt is given: the first attempts fail
			srv.Restart(t)
			c := srv.Client(t)
			redistest.Poll(t, 15*time.Second, "the release applied after Redis came back", func() error {
				n, err := c.ZCard(t.Context(), f.Key).Result()
				if err == nil && n != 0 {
					err = fmt.Errorf("%d entries in %s", n, f.Key)
				}
				return err
			})
		})
	}
}

// A release Redis could not take until long after the request's bound and
// fencestore.AbandonMargin had passed (Redis down that long) is still sent
// when Redis comes back: a request admitted afterwards through another
// replica finds the entry released (or is woken by its release) instead of
// watching it out for the whole bound.
func TestReleaseRetriedPastBound(t *testing.T) {
	for _, tc := range batchings {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
			a, b := replicas(t, srv, tc.opts)
			const bound = 2 * time.Second
			old := flyThrough(t, a, fencestore.Admission{Resource: "r", Token: 41, Flight: bound})
			srv.Kill()
			a.Release(old)
			// Down past the bound and the margin: what the release was
			// retried for at most before.
			time.Sleep(bound + fencestore.AbandonMargin + time.Second)
			srv.Restart(t)
			newer := flyThrough(t, b, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute})
			expired, err := b.Drain(t.Context(), newer)
			if err != nil || expired {
				t.Fatalf("Drain of 42 = (%v, %v) with 41's release owed since before the outage; want (false, nil): "+
					"the release, not the waiter's clock, ends 41", expired, err)
			}
			b.Release(newer)
		})
	}
}
