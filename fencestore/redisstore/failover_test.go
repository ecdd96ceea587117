package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// A Sentinel failover under load with the barrier on: writers on several
// resources through two replicas, each request waiting for the older ones
// in flight, when the master is killed. The releases that fail meanwhile
// are sent again until the new master acknowledges them (and those the old
// master acknowledged shortly before, which the promoted replica may lack),
// so every resource admits again within seconds of the promotion, not after
// the upstream timeout (bound) that an entry nobody releases holds a
// resource for. The figure is printed; the test fails only past half the
// bound, which the old barrier (releases never retried, entries held until
// their deadline) always reached.
func TestFailoverReleasesResume(t *testing.T) {
	const (
		bound     = 30 * time.Second
		resources = 6
		writers   = 3 // per resource and replica
	)
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	sentinels := redistest.StartSentinels(t, 3, "mymaster", master, redistest.SentinelOptions{Quorum: 2})
	_, prefix := newStore(t, master, redisstore.Options{}) // a prefix of its own
	open := func() *redisstore.Store {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            "mymaster",
			SentinelAddrs:         sentinels.Addrs(),
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialerRetries:         1,
			DialTimeout:           200 * time.Millisecond,
		})
		s := redisstore.New(c, redisstore.Options{KeyPrefix: prefix})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	stores := []*redisstore.Store{open(), open()}

	ctx, stop := context.WithCancel(t.Context())
	var mu sync.Mutex
	passed := make([]time.Time, resources) // the last request through the barrier, per resource
	seqs := make([]uint64, resources)
	var seqMu sync.Mutex
	var wg sync.WaitGroup
	for r := range resources {
		for _, s := range stores {
			for range writers {
				wg.Go(func() {
					res := fmt.Sprintf("res/%d", r)
					for ctx.Err() == nil {
						seqMu.Lock()
						seqs[r]++
						seq := seqs[r]
						seqMu.Unlock()
						actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						d, err := s.Admit(actx, fencestore.Admission{Resource: res, Token: 1, Sequence: seq, HasSequence: true, Flight: bound})
						cancel()
						if err != nil || !d.Admitted {
							// Unavailable in the outage, or overtaken by a
							// later sequence: try again.
							time.Sleep(20 * time.Millisecond)
							continue
						}
						if d.Flight.Older {
							dctx, cancel := context.WithTimeout(ctx, bound)
							_, err = s.Drain(dctx, d.Flight)
							cancel()
						}
						if err == nil {
							mu.Lock()
							passed[r] = time.Now()
							mu.Unlock()
							time.Sleep(10 * time.Millisecond) // the upstream
						}
						s.Release(d.Flight)
					}
				})
			}
		}
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	time.Sleep(time.Second) // under load
	master.Kill()
	redistest.WaitRole(t, replica.Addr(), nil, "master", 30*time.Second)
	promoted := time.Now()
	var worst time.Duration
	redistest.Poll(t, bound, "every resource admits again after the promotion", func() error {
		mu.Lock()
		defer mu.Unlock()
		var errs []error
		worst = 0
		for r, at := range passed {
			if !at.After(promoted) {
				errs = append(errs, fmt.Errorf("res/%d not since", r))
				continue
			}
			worst = max(worst, at.Sub(promoted))
		}
		return errors.Join(errs...)
	})
	t.Logf("every resource admitted again within %v of the promotion (bound %v)", worst.Round(time.Millisecond), bound)
	if worst > bound/2 {
		t.Errorf("a resource admitted again only %v after the promotion: held by entries whose releases were lost", worst)
	}
}
