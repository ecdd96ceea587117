package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

type drained struct {
	expired bool
	err     error
	at      time.Time
}

func drainAsync(s fencestore.Store, ctx context.Context, f fencestore.Flight) <-chan drained {
	ch := make(chan drained, 1)
	go func() {
		exp, err := s.Drain(ctx, f)
		ch <- drained{exp, err, time.Now()}
	}()
	return ch
}

// The barrier between two replicas: two stores, each with its own client,
// on one etcd. A Drain is woken by the watch, not by a poll: DrainPoll is
// far longer than the waits allowed here.
func TestBarrierAcrossStores(t *testing.T) {
	c := etcdtest.Start(t)
	newStore := func() *etcdstore.Store {
		s := etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: "fence:", DrainPoll: time.Minute})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := newStore(), newStore()

	t.Run("ReleaseWakes", func(t *testing.T) {
		var wake []time.Duration
		for i := range 30 {
			token := uint64(100 + 2*i)
			older := mustAdmit(t, a, fencestore.Admission{Resource: "x/1", Token: token, Flight: time.Minute})
			newer := mustAdmit(t, b, fencestore.Admission{Resource: "x/1", Token: token + 1, Flight: time.Minute})
			if !newer.Flight.Older {
				t.Fatalf("%d through B while %d is in flight through A: Older not set", token+1, token)
			}
			ch := drainAsync(b, ctxT(t), newer.Flight)
			if i == 0 {
				select {
				case d := <-ch:
					t.Fatalf("B's Drain returned (%v, %v) while A's request is in flight", d.expired, d.err)
				case <-time.After(300 * time.Millisecond):
				}
			}
			released := time.Now()
			a.Release(older.Flight)
			select {
			case d := <-ch:
				if d.err != nil || d.expired {
					t.Fatalf("Drain = (%v, %v), want (false, nil)", d.expired, d.err)
				}
				wake = append(wake, d.at.Sub(released))
			case <-time.After(5 * time.Second):
				t.Fatal("B's Drain still waiting 5s after A released")
			}
			b.Release(newer.Flight)
		}
		t.Logf("wake after a release in another store: %s", quantiles(wake))
	})

	t.Run("UnreleasedHoldsUntilAbandoned", func(t *testing.T) {
		// A replica admits 50 and dies: its client closes without a
		// release. 51 through B waits until B has watched 50 for its
		// flight plus AbandonMargin, on B's own clock (no lease decides:
		// TestDrainAbandonsOnItsOwnClock), and then goes.
		const flight = 2 * time.Second
		dead := newStore()
		mustAdmit(t, dead, fencestore.Admission{Resource: "x/2", Token: 50, Flight: flight})
		if err := dead.Close(); err != nil {
			t.Fatal(err)
		}
		admittedAt := time.Now()
		newer := mustAdmit(t, b, fencestore.Admission{Resource: "x/2", Token: 51, Flight: time.Minute})
		defer b.Release(newer.Flight)
		if !newer.Flight.Older {
			t.Fatal("51 admitted while 50 is in flight: Older not set")
		}
		d := <-drainAsync(b, ctxT(t), newer.Flight)
		held := d.at.Sub(admittedAt)
		t.Logf("held %v by a %v flight whose replica died", held.Round(time.Millisecond), flight)
		if d.err != nil || !d.expired {
			t.Fatalf("Drain = (%v, %v), want (true, nil): the older record was abandoned", d.expired, d.err)
		}
		if held < flight+fencestore.AbandonMargin {
			t.Fatalf("held %v by a %v flight: less than the flight plus AbandonMargin", held, flight)
		}
	})
}

// A release etcd could not take until long after the request's bound and
// fencestore.AbandonMargin had passed (etcd down that long) is still sent
// when etcd comes back: a request admitted afterwards through another
// replica finds the record deleted (or is woken by its deletion) instead
// of watching it out for the whole bound.
func TestReleaseRetriedPastBound(t *testing.T) {
	c := etcdtest.Start(t)
	newStore := func() *etcdstore.Store {
		s := etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: "pastbound:"})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	owner, waiter := newStore(), newStore()
	const bound = 2 * time.Second
	older := mustAdmit(t, owner, fencestore.Admission{Resource: "r", Token: 41, Flight: bound}).Flight
	cl := c.Client(t)
	if r, err := cl.Get(ctxT(t), older.Key); err != nil || r.Count != 1 {
		t.Fatalf("41's in-flight record %q: %v, %v", older.Key, r, err)
	}
	c.Members[0].Kill()
	owner.Release(older)
	// Down past the bound and the margin: what the release was retried
	// for at most before.
	time.Sleep(bound + fencestore.AbandonMargin + time.Second)
	c.Members[0].Restart(t)
	// The owner's release, retried with its backoff, deletes the record
	// once etcd is back: waited for here rather than raced against the
	// waiter's watch below (given up past its bound, as before, it never
	// would be: the record's lease lasts two days).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := cl.Get(ctxT(t), older.Key)
		if err == nil && r.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("41's in-flight record %q still there 30 s after etcd came back (%v): its release was given up", older.Key, err)
		}
	}
	newer := mustAdmit(t, waiter, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute}).Flight
	defer waiter.Release(newer)
	expired, err := waiter.Drain(ctxT(t), newer)
	if err != nil || expired {
		t.Fatalf("Drain of 42 = (%v, %v) with 41's release owed since before the outage; want (false, nil): "+
			"the release, not the waiter's clock, ends 41", expired, err)
	}
}
