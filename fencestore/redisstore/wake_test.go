package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// A release wakes its waiters without a command of theirs: 20 requests
// wait behind 41 (equal 42s, which never wait for each other), through two
// replicas; releasing 41 costs Redis the release script and its own
// commands, not a look per waiter (the waiters learn from the announcement
// of 41's member). Counted in INFO commandstats, the scripts' commands
// included; the waiters' periodic look is set far beyond the test.
func TestReleaseWakesWithoutCommands(t *testing.T) {
	const waiters = 20
	srv := redistest.Start(t)
	a, b := replicas(t, srv, redisstore.Options{DrainPoll: time.Hour})
	old := flyThrough(t, a, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute})
	var flights []fencestore.Flight
	for i := range waiters {
		s := a
		if i%2 == 1 {
			s = b
		}
		f := flyThrough(t, s, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute})
		if !f.Older {
			t.Fatal("42 does not see 41 in flight")
		}
		flights = append(flights, f)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var started, wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i, f := range flights {
		s := a
		if i%2 == 1 {
			s = b
		}
		started.Add(1)
		wg.Go(func() {
			started.Done()
			if _, err := s.Drain(ctx, f); err != nil {
				errs <- err
			}
		})
	}
	started.Wait()
	time.Sleep(300 * time.Millisecond) // every Drain registered (a look at start would count before)
	before := serverStats(t, srv).calls
	a.Release(old)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Drain: %v", err)
	}
	used := serverStats(t, srv).calls - before
	t.Logf("releasing 41 woke %d waiters with %d Redis commands in all", waiters, used)
	if used >= waiters {
		t.Errorf("%d commands to wake %d waiters: the waiters look at the store on a release", used, waiters)
	}
	for i, f := range flights {
		if i%2 == 1 {
			b.Release(f)
		} else {
			a.Release(f)
		}
	}
}
