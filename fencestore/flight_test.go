package fencestore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// admitLocal registers a in l and settles it as admitted, as a store whose
// decision admits it does.
func admitLocal(t *testing.T, l *LocalFlights, a Admission) Flight {
	t.Helper()
	if a.Flight == 0 {
		a.Flight = time.Minute
	}
	f := l.Begin(a)
	d, err := l.Settle(f, Decision{Admitted: true, Mark: a.Token}, nil)
	if err != nil || !d.Flight.Registered() {
		t.Fatalf("Settle(%+v) = %+v, %v", a, d, err)
	}
	return d.Flight
}

type drainResult struct {
	expired bool
	err     error
	at      time.Time
}

func drainLocal(l *LocalFlights, ctx context.Context, f Flight) <-chan drainResult {
	ch := make(chan drainResult, 1)
	go func() {
		exp, err := l.Drain(ctx, f)
		ch <- drainResult{exp, err, time.Now()}
	}()
	return ch
}

// A waiter waits for its snapshot only. (42, seq 1) is admitted while 41 is
// in flight; then an unsequenced 42, ordered before (42, 1), is admitted
// after it and stays in flight. Once 41 is released, (42, 1) goes: the
// later request never holds it back (a stream of them would starve it).
func TestLocalFlightsWaitForSnapshotOnly(t *testing.T) {
	var l LocalFlights
	f41 := admitLocal(t, &l, Admission{Resource: "r", Token: 41})
	f42s1 := admitLocal(t, &l, Admission{Resource: "r", Token: 42, Sequence: 1, HasSequence: true})
	if !f42s1.Older {
		t.Fatal("(42, 1) admitted while 41 is in flight: Older not set")
	}
	later := admitLocal(t, &l, Admission{Resource: "r", Token: 42})
	defer l.Release(later)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ch := drainLocal(&l, ctx, f42s1)
	l.Release(f41)
	d := <-ch
	if d.err != nil || d.expired {
		t.Fatalf("(42, 1) after 41 released, an unsequenced 42 admitted after it in flight: Drain = (%v, %v), want (false, nil)", d.expired, d.err)
	}
	l.Release(f42s1)
}

// An older request that is never released holds a newer one back until the
// newer one's waiter has watched it for its bound plus AbandonMargin, on
// the waiter's own clock: not until the older one's own deadline, which
// the owner timed from its earlier admission. Once abandoned, its record
// is gone: a later request does not find it.
func TestLocalFlightsAbandonedByWaitersWatch(t *testing.T) {
	const bound = 300 * time.Millisecond
	var l LocalFlights
	old := admitLocal(t, &l, Admission{Resource: "r", Token: 10, Flight: bound})
	defer l.Release(old)
	// The owner's deadline passes before the waiter is even admitted.
	time.Sleep(bound + 50*time.Millisecond)
	before := time.Now()
	newer := admitLocal(t, &l, Admission{Resource: "r", Token: 11})
	if !newer.Older {
		t.Fatal("11 admitted while 10 is registered: Older not set")
	}
	d := <-drainLocal(&l, t.Context(), newer)
	if d.err != nil || !d.expired {
		t.Fatalf("Drain = (%v, %v), want (true, nil): 10 was abandoned", d.expired, d.err)
	}
	// A lower bound, so not a timed assertion: the waiter cannot have
	// watched 10 for bound+AbandonMargin before it was admitted.
	if held := d.at.Sub(before); held < bound+AbandonMargin {
		t.Fatalf("11 held %v, less than 10's bound %v plus AbandonMargin %v watched by its own waiter", held, bound, AbandonMargin)
	}
	l.Release(newer)
	if f := admitLocal(t, &l, Admission{Resource: "r", Token: 12}); f.Older {
		t.Fatal("12 finds an older request in flight: 10's abandoned record, or 11's released one, remains")
	}
}

// A release wakes only the waiters whose snapshot holds it: 50 waiters
// behind one older request stay asleep while 200 requests that none of
// them waits for come and go, and each wakes once when the older one goes.
func TestLocalFlightsTargetedWakeUps(t *testing.T) {
	const waiters, unrelated = 50, 200
	var l LocalFlights
	old := admitLocal(t, &l, Admission{Resource: "r", Token: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var chs []<-chan drainResult
	var flights []Flight
	for range waiters {
		f := admitLocal(t, &l, Admission{Resource: "r", Token: 2})
		flights = append(flights, f)
		chs = append(chs, drainLocal(&l, ctx, f))
	}
	for i := range unrelated {
		// Ordered after every waiter, or equal to them: in no snapshot.
		tok := uint64(2)
		if i%2 == 0 {
			tok = 3 + uint64(i)
		}
		l.Release(admitLocal(t, &l, Admission{Resource: "r", Token: tok}))
	}
	// Another resource's releases are unrelated too.
	for range unrelated {
		l.Release(admitLocal(t, &l, Admission{Resource: "other", Token: 1}))
	}
	if n := l.wakes.Load(); n != 0 {
		t.Fatalf("%d wake-ups from %d releases that no waiter's snapshot holds", n, 2*unrelated)
	}
	l.Release(old)
	for i, ch := range chs {
		if d := <-ch; d.err != nil || d.expired {
			t.Fatalf("waiter %d: Drain = (%v, %v), want (false, nil)", i, d.expired, d.err)
		}
		l.Release(flights[i])
	}
	if n := l.wakes.Load(); n > waiters {
		t.Fatalf("%d wake-ups for %d waiters, each of which one release unblocks", n, waiters)
	}
}

// Drain ends at its context, and the table of cases that need no wait.
func TestLocalFlightsDrainCases(t *testing.T) {
	var l LocalFlights
	old := admitLocal(t, &l, Admission{Resource: "r", Token: 1})
	defer l.Release(old)
	newer := admitLocal(t, &l, Admission{Resource: "r", Token: 2})
	released := admitLocal(t, &l, Admission{Resource: "r", Token: 3})
	l.Release(released)
	equal := admitLocal(t, &l, Admission{Resource: "r", Token: 1})
	defer l.Release(equal)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	for _, tc := range []struct {
		name    string
		f       Flight
		wantErr error
	}{
		{"zero Flight", Flight{}, nil},
		{"equal order", equal, nil},
		{"released before its Drain", released, nil},
		{"older in flight past ctx", newer, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, err := l.Drain(ctx, tc.f)
			if exp || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Drain = (%v, %v), want (false, %v)", exp, err, tc.wantErr)
			}
		})
	}
	l.Release(newer)
	l.Release(newer) // twice: harmless
	l.Release(Flight{})
}
