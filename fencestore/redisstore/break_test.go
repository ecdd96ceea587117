//go:build faultsbreak

package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// The fault suite's controls, in the only build that has them (go test
// -tags faultsbreak): each breaks what it claims to, and off, the same
// build behaves as the shipped one.

// zmscores is how many ZMSCORE commands (a waiter's look at the store)
// srv has run.
func zmscores(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	text, err := srv.Client(t).Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return parseCommandStats(text)["zmscore"]
}

// broadcast: the announced release of an entry of another resource wakes
// the waiters of "s", and each asks the store what is left of its snapshot;
// off, they learn nothing from it and ask nothing. Their periodic look is
// set far beyond the test.
func TestBreakBroadcast(t *testing.T) {
	const waiters = 10
	for _, c := range []struct {
		name      string
		broadcast bool
	}{{"off", false}, {"on", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(redisstore.SetBreaks(c.broadcast, false)) // after the stores close
			srv := redistest.Start(t)
			a, b := replicas(t, srv, redisstore.Options{DrainPoll: time.Hour})
			held := flyThrough(t, a, fencestore.Admission{Resource: "s", Token: 41, Flight: time.Minute})
			other := flyThrough(t, a, fencestore.Admission{Resource: "r", Token: 7, Flight: time.Minute})
			// A later entry of "r", so that 7's release is announced (one
			// nobody may wait for is not).
			later := flyThrough(t, b, fencestore.Admission{Resource: "r", Token: 8, Flight: time.Minute})
			defer b.Release(later)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, waiters)
			var flights []fencestore.Flight
			for i := range waiters {
				s := []*redisstore.Store{a, b}[i%2]
				f := flyThrough(t, s, fencestore.Admission{Resource: "s", Token: 42, Flight: time.Minute})
				flights = append(flights, f)
				wg.Go(func() {
					if _, err := s.Drain(ctx, f); err != nil {
						errs <- err
					}
					s.Release(f)
				})
			}
			time.Sleep(300 * time.Millisecond) // every Drain registered and through its first look
			before := zmscores(t, srv)
			a.Release(other)
			time.Sleep(300 * time.Millisecond) // the announcement handled
			looks := zmscores(t, srv) - before
			a.Release(held)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Drain: %v", err)
			}
			t.Logf("the release of another resource's entry cost %d looks of %d waiters", looks, waiters)
			if c.broadcast && looks < waiters {
				t.Errorf("%d looks: the broadcast control did not make every waiter look", looks)
			}
			if !c.broadcast && looks != 0 {
				t.Errorf("%d looks without the control: a release woke waiters it cannot unblock", looks)
			}
		})
	}
}

// noretry: a release sent while Redis is down is not sent again, so the
// entry is still there long after Redis came back; off, it is gone
// (TestReleaseRetried).
func TestBreakNoRetry(t *testing.T) {
	for _, tc := range batchings {
		for _, c := range []struct {
			name    string
			noretry bool
		}{{"off", false}, {"on", true}} {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				t.Cleanup(redisstore.SetBreaks(false, c.noretry))
				srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
				s, _ := newStore(t, srv, tc.opts)
				f := flyThrough(t, s, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute})
				srv.Kill()
				s.Release(f)
				time.Sleep(3 * time.Second) // longer than one attempt is given
				srv.Restart(t)
				cl := srv.Client(t)
				if !c.noretry {
					redistest.Poll(t, 15*time.Second, "the release applied after Redis came back", func() error {
						n, err := cl.ZCard(t.Context(), f.Key).Result()
						if err == nil && n != 0 {
							err = fmt.Errorf("%d entries in %s", n, f.Key)
						}
						return err
					})
					return
				}
				// Retried, the release would land within the longest
				// backoff and an attempt (about 3 s) of Redis's return.
				time.Sleep(5 * time.Second)
				if n, err := cl.ZCard(t.Context(), f.Key).Result(); err != nil || n != 1 {
					t.Errorf("ZCARD %s = %d, %v with the noretry control; want the entry still there", f.Key, n, err)
				}
			})
		}
	}
}
