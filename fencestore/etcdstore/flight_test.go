package etcdstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// The barrier's rules, each against a real etcd and two or more stores
// (replicas), each with a client of its own. DrainPoll is a minute: every
// wake-up here comes from the watch, or from the waiter's own clock.

func barrierStore(t *testing.T, cl *clientv3.Client, prefix string) *etcdstore.Store {
	t.Helper()
	s := etcdstore.New(cl, etcdstore.Options{KeyPrefix: prefix, DrainPoll: time.Minute})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// inflight returns the in-flight records under prefix: key to value.
func inflight(t *testing.T, cl *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cl.Get(ctxT(t), prefix+"\x00inflight/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// A waiter waits only for what was in flight when it was admitted: an
// unsequenced 42, ordered before (42, 1) but admitted after it, never
// holds (42, 1) back, so a stream of them cannot starve it.
func TestDrainWaitsForSnapshotOnly(t *testing.T) {
	c := etcdtest.Start(t)
	a, b := barrierStore(t, c.Client(t), "snap:"), barrierStore(t, c.Client(t), "snap:")
	f41 := mustAdmit(t, a, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute}).Flight
	f421 := mustAdmit(t, b, fencestore.Admission{Resource: "r", Token: 42, Sequence: 1, HasSequence: true, Flight: time.Minute}).Flight
	if !f421.Older {
		t.Fatal("(42, 1) admitted while 41 is in flight: Older not set")
	}
	ch := drainAsync(b, ctxT(t), f421)
	var later []fencestore.Flight
	for range 3 { // admitted after (42, 1), ordered before it, left in flight
		later = append(later, mustAdmit(t, a, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute}).Flight)
	}
	a.Release(f41)
	d := <-ch
	if d.err != nil || d.expired {
		t.Fatalf("(42, 1) after 41 released, with unsequenced 42s admitted after it in flight: Drain = (%v, %v), want (false, nil)", d.expired, d.err)
	}
	for _, f := range append(later, f421) {
		a.Release(f)
		b.Release(f)
	}
}

// An older request that is never released (its replica died, froze or
// lost etcd) holds a newer one back until the newer one's waiter has
// watched it for its bound plus AbandonMargin, on the waiter's own clock;
// no lease decides. The waiter then deletes the record. The record carries
// its bound (nanoseconds), and a lease far beyond it (garbage collection).
func TestDrainAbandonsOnItsOwnClock(t *testing.T) {
	const bound = 2 * time.Second
	c := etcdtest.Start(t)
	cl := c.Client(t)
	dead, b := barrierStore(t, c.Client(t), "aban:"), barrierStore(t, c.Client(t), "aban:")
	mustAdmit(t, dead, fencestore.Admission{Resource: "r", Token: 50, Flight: bound})
	recs := inflight(t, cl, "aban:")
	if len(recs) != 1 {
		t.Fatalf("in-flight records %q, want one", recs)
	}
	for key, v := range recs {
		if v != strconv.FormatInt(int64(bound), 10) {
			t.Errorf("record %q = %q, want its bound in nanoseconds, %d", key, v, bound)
		}
		resp, err := cl.Get(ctxT(t), key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatal(resp, err)
		}
		ttl, err := cl.TimeToLive(ctxT(t), clientv3.LeaseID(resp.Kvs[0].Lease))
		if err != nil || time.Duration(ttl.GrantedTTL)*time.Second < 24*time.Hour {
			t.Errorf("record's lease: %+v, %v; want a TTL of days (garbage collection only)", ttl, err)
		}
	}
	if err := dead.Close(); err != nil { // dies without a release
		t.Fatal(err)
	}
	// The owner's own deadline passes before the waiter is admitted: only
	// the waiter's watch counts.
	time.Sleep(bound - 500*time.Millisecond)
	before := time.Now()
	newer := mustAdmit(t, b, fencestore.Admission{Resource: "r", Token: 51, Flight: time.Minute})
	defer b.Release(newer.Flight)
	if !newer.Flight.Older {
		t.Fatal("51 admitted while 50 is in flight: Older not set")
	}
	d := <-drainAsync(b, ctxT(t), newer.Flight)
	if d.err != nil || !d.expired {
		t.Fatalf("Drain = (%v, %v), want (true, nil): 50 was abandoned", d.expired, d.err)
	}
	// A lower bound, never timed tightly: the waiter cannot have watched
	// 50 for its bound and the margin before it was admitted.
	held := d.at.Sub(before)
	t.Logf("51 held %v by a %v flight whose replica died", held.Round(time.Millisecond), bound)
	if held < bound+fencestore.AbandonMargin {
		t.Fatalf("51 held %v, less than 50's bound %v plus AbandonMargin %v on its waiter's clock", held, bound, fencestore.AbandonMargin)
	}
	// The waiter deleted the abandoned record (no lease did: it lasts days).
	etcdtest.Poll(t, 10*time.Second, "the abandoned record deleted", func() error {
		if recs := inflight(t, cl, "aban:"); len(recs) != 1 {
			return fmt.Errorf("in-flight records %q, want only 51's", recs)
		}
		return nil
	})
}

// A release that etcd did not acknowledge (the replica's connection to
// etcd down) is sent again until it is: the request it held back goes
// once the connection is back, not when a lease or a waiter's bound ends.
func TestReleaseRetried(t *testing.T) {
	c := etcdtest.Start(t)
	p := startProxy(t, c.Endpoints()[0])
	owner := barrierStore(t, etcdtest.NewClient(t, p.Endpoint()), "retry:")
	waiter := barrierStore(t, c.Client(t), "retry:")
	older := mustAdmit(t, owner, fencestore.Admission{Resource: "r", Token: 1, Flight: time.Minute})
	newer := mustAdmit(t, waiter, fencestore.Admission{Resource: "r", Token: 2, Flight: time.Minute})
	defer waiter.Release(newer.Flight)
	if !newer.Flight.Older {
		t.Fatal("2 admitted while 1 is in flight: Older not set")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ch := drainAsync(waiter, ctx, newer.Flight)
	p.Down(true)
	owner.Release(older.Flight)
	// The first attempt waits for a connection until releaseTimeout (2s)
	// and fails; the next ones back off.
	time.Sleep(3 * time.Second)
	select {
	case d := <-ch:
		t.Fatalf("Drain returned (%v, %v) while the release could not reach etcd", d.expired, d.err)
	default:
	}
	p.Down(false)
	d := <-ch
	if d.err != nil || d.expired {
		t.Fatalf("Drain = (%v, %v), want (false, nil): the release retried once etcd was reachable again", d.expired, d.err)
	}
}

// An admission whose reply came after its caller gave up (past
// FENCE_STORE_TIMEOUT: the request got 503 and was not forwarded) was
// applied all the same: its record is released once the reply comes, so
// the next request does not wait for it.
func TestLateAdmissionReleased(t *testing.T) {
	c := etcdtest.Start(t)
	cl := c.Client(t)
	p := startProxy(t, c.Endpoints()[0])
	slow := barrierStore(t, etcdtest.NewClient(t, p.Endpoint()), "late:")
	other := barrierStore(t, c.Client(t), "late:")
	// A first admission on the connection, before the delay.
	other.Release(mustAdmit(t, slow, fencestore.Admission{Resource: "warm", Token: 1, Flight: time.Minute}).Flight)
	p.Delay(time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err := slow.Admit(ctx, fencestore.Admission{Resource: "r", Token: 10, Flight: time.Minute})
	cancel()
	if err == nil {
		t.Fatal("Admit with a reply 1s late and a 300ms timeout succeeded")
	}
	// The transaction was applied: the mark moved and the record was put.
	etcdtest.Poll(t, 5*time.Second, "the late admission applied", func() error {
		if m, ok, err := other.Mark(ctxT(t), "r"); err != nil || !ok || m != 10 {
			return fmt.Errorf("mark %d, %v, %v; want 10", m, ok, err)
		}
		return nil
	})
	// And its record is released once the reply arrives.
	p.Delay(0)
	etcdtest.Poll(t, 10*time.Second, "the late admission's record released", func() error {
		if recs := inflight(t, cl, "late:"); len(recs) != 0 {
			return fmt.Errorf("in-flight records %q remain", recs)
		}
		return nil
	})
	next := mustAdmit(t, other, fencestore.Admission{Resource: "r", Token: 11, Flight: time.Minute})
	defer other.Release(next.Flight)
	if next.Flight.Older {
		t.Fatal("11 waits for 10, which was never forwarded")
	}
}

// A release wakes only the waiters whose snapshot holds it: 20 waiters,
// (42, 1) .. (42, 20), wait behind 41; 50 unsequenced 42s (ordered before
// every waiter, but admitted after them) come and go through another
// replica, and the waiters' replica sends etcd nothing for them. 41's
// release then frees them all.
func TestDrainTargetedWakeUps(t *testing.T) {
	const waiters, unrelated = 20, 50
	c := etcdtest.Start(t)
	var rpcs rpcCount
	owner := barrierStore(t, c.Client(t), "wake:")
	w := barrierStore(t, countingClient(t, &rpcs, c.Endpoints()...), "wake:")
	f41 := mustAdmit(t, owner, fencestore.Admission{Resource: "r", Token: 41, Flight: time.Minute}).Flight
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var flights []fencestore.Flight
	var chs []<-chan drained
	for i := range waiters {
		f := mustAdmit(t, w, fencestore.Admission{Resource: "r", Token: 42, Sequence: uint64(i + 1), HasSequence: true, Flight: time.Minute}).Flight
		flights = append(flights, f)
		chs = append(chs, drainAsync(w, ctx, f))
	}
	// Let every waiter register with the shared watch.
	time.Sleep(500 * time.Millisecond)
	before := rpcs.Total()
	var wg sync.WaitGroup
	for range unrelated {
		wg.Go(func() {
			f := mustAdmit(t, owner, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute}).Flight
			owner.Release(f)
		})
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the deletions reach the watch
	if n := rpcs.Total() - before; n != 0 {
		t.Fatalf("the waiters' replica made %d calls to etcd (%v) for %d releases that no waiter's snapshot holds", n, rpcs.Calls(), unrelated)
	}
	owner.Release(f41)
	for i, ch := range chs {
		if d := <-ch; d.err != nil || d.expired {
			t.Fatalf("waiter %d: Drain = (%v, %v), want (false, nil)", i, d.expired, d.err)
		}
		w.Release(flights[i])
	}
	t.Logf("the waiters' replica: %v", rpcs.Calls())
}

// The waiters' shared watch breaks when etcd restarts (with the release
// made while it was down): the watch is made again, the records still
// waited for are read, and the waiter goes once the release reaches etcd,
// long before any bound.
func TestDrainAcrossEtcdRestart(t *testing.T) {
	c := etcdtest.Start(t)
	newStore := func() *etcdstore.Store {
		s := etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: "restart:", DrainPoll: 200 * time.Millisecond})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	owner, waiter := newStore(), newStore()
	older := mustAdmit(t, owner, fencestore.Admission{Resource: "r", Token: 1, Flight: time.Minute}).Flight
	newer := mustAdmit(t, waiter, fencestore.Admission{Resource: "r", Token: 2, Flight: time.Minute}).Flight
	defer waiter.Release(newer)
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	ch := drainAsync(waiter, ctx, newer)
	stillWaitingFor(t, ch, 300*time.Millisecond)
	c.Members[0].Kill()
	owner.Release(older)
	time.Sleep(500 * time.Millisecond)
	c.Members[0].Restart(t)
	d := <-ch
	if d.err != nil || d.expired {
		t.Fatalf("Drain = (%v, %v), want (false, nil): released across the restart", d.expired, d.err)
	}
}

// stillWaitingFor fails the test if ch delivers within d.
func stillWaitingFor(t *testing.T, ch <-chan drained, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Drain returned (%v, %v) while the older request is in flight", r.expired, r.err)
	case <-time.After(d):
	}
}
