package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// flightFor is the upstream deadline the barrier steps register with: long
// enough that no step sees it pass unless it means to.
const flightFor = time.Minute

// fly admits a with the barrier and fails the test unless it is admitted.
func fly(t *testing.T, s fencestore.Store, a fencestore.Admission) fencestore.Flight {
	t.Helper()
	if a.Flight == 0 {
		a.Flight = flightFor
	}
	d, err := s.Admit(ctxT(t), a)
	if err != nil {
		t.Fatalf("Admit(%+v): %v", a, err)
	}
	if !d.Admitted {
		t.Fatalf("Admit(%+v) refused by mark %d", a, d.Mark)
	}
	if !d.Flight.Registered() {
		t.Fatalf("Admit(%+v) with Flight: no registration in the decision", a)
	}
	return d.Flight
}

// drained is the outcome of one Drain call.
type drained struct {
	expired bool
	err     error
	at      time.Time
}

// drainAsync runs Drain in a goroutine and returns a channel that receives
// its outcome.
func drainAsync(s fencestore.Store, ctx context.Context, f fencestore.Flight) <-chan drained {
	out := make(chan drained, 1)
	go func() {
		exp, err := s.Drain(ctx, f)
		out <- drained{exp, err, time.Now()}
	}()
	return out
}

// stillWaiting fails the test if ch delivers within a short while: Drain
// must still be holding its request back.
func stillWaiting(t *testing.T, ch <-chan drained, what string) {
	t.Helper()
	select {
	case d := <-ch:
		t.Fatalf("%s: Drain returned (%v, %v) while an older request is in flight", what, d.expired, d.err)
	case <-time.After(150 * time.Millisecond):
	}
}

func released(t *testing.T, ch <-chan drained, what string, wantExpired bool) drained {
	t.Helper()
	select {
	case d := <-ch:
		if d.err != nil || d.expired != wantExpired {
			t.Fatalf("%s: Drain = (%v, %v), want (%v, nil)", what, d.expired, d.err, wantExpired)
		}
		return d
	case <-time.After(opTimeout):
		t.Fatalf("%s: Drain still waiting %v after the older request ended", what, opTimeout)
	}
	return drained{}
}

func testBarrier(t *testing.T, s fencestore.Store) {
	ge := fencestore.AtLeast

	t.Run("OlderHoldsNewerUntilReleased", func(t *testing.T) {
		old := fly(t, s, fencestore.Admission{Resource: "b/1", Token: 41, Compare: ge})
		if old.Older {
			t.Fatal("first request of a resource reports an older one in flight")
		}
		newer := fly(t, s, fencestore.Admission{Resource: "b/1", Token: 42, Compare: ge})
		if !newer.Older {
			t.Fatal("42 admitted while 41 is in flight: Older not set")
		}
		ch := drainAsync(s, ctxT(t), newer)
		stillWaiting(t, ch, "42 behind 41")
		releasedAt := time.Now()
		s.Release(old)
		d := released(t, ch, "42 after 41 released", false)
		t.Logf("Drain returned %v after the release", d.at.Sub(releasedAt))
		s.Release(newer)
		s.Release(newer) // twice: harmless
		s.Release(fencestore.Flight{})
	})

	t.Run("DrainHonoursContext", func(t *testing.T) {
		old := fly(t, s, fencestore.Admission{Resource: "b/2", Token: 1, Compare: ge})
		defer s.Release(old)
		newer := fly(t, s, fencestore.Admission{Resource: "b/2", Token: 2, Compare: ge})
		defer s.Release(newer)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if _, err := s.Drain(ctx, newer); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Drain past its ctx = %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("EqualTokensNeverWait", func(t *testing.T) {
		a := fly(t, s, fencestore.Admission{Resource: "b/3", Token: 7, Compare: ge})
		defer s.Release(a)
		b := fly(t, s, fencestore.Admission{Resource: "b/3", Token: 7, Compare: ge})
		defer s.Release(b)
		if b.Older {
			t.Fatal("an equal token reports an older request in flight")
		}
		ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
		defer cancel()
		if exp, err := s.Drain(ctx, b); err != nil || exp {
			t.Fatalf("Drain of an equal token = (%v, %v), want at once (false, nil)", exp, err)
		}
	})

	t.Run("SequencesOrderedByPair", func(t *testing.T) {
		s7 := fly(t, s, fencestore.Admission{Resource: "b/4", Token: 42, Sequence: 7, HasSequence: true})
		none := fly(t, s, fencestore.Admission{Resource: "b/4", Token: 42, Compare: ge})
		if none.Older {
			t.Fatal("(42, no sequence) waits for (42, 7): no sequence comes first")
		}
		s.Release(none)
		s8 := fly(t, s, fencestore.Admission{Resource: "b/4", Token: 42, Sequence: 8, HasSequence: true})
		if !s8.Older {
			t.Fatal("(42, 8) admitted while (42, 7) is in flight: Older not set")
		}
		ch := drainAsync(s, ctxT(t), s8)
		stillWaiting(t, ch, "(42, 8) behind (42, 7)")
		s.Release(s7)
		released(t, ch, "(42, 8) after (42, 7)", false)
		s.Release(s8)
	})

	t.Run("AbandonedAfterItsBoundAndTheMargin", func(t *testing.T) {
		// The older request is never released (its replica died): the
		// waiter gives it up once it has watched it, on its own clock, for
		// the older request's bound (not its own) and AbandonMargin; no
		// sooner, and not much later. It then removes the older entry: a
		// later request finds nothing of it.
		const short = 300 * time.Millisecond
		fly(t, s, fencestore.Admission{Resource: "b/5", Token: 10, Compare: ge, Flight: short})
		start := time.Now()
		newer := fly(t, s, fencestore.Admission{Resource: "b/5", Token: 11, Compare: ge})
		if !newer.Older {
			t.Fatal("11 admitted while 10 is in flight: Older not set (no store decides by its own clock that 10 is over)")
		}
		d := released(t, drainAsync(s, ctxT(t), newer), "11 after watching 10 past its bound", true)
		waited := d.at.Sub(start)
		t.Logf("11 gave 10 up %v after its admission began (bound %v, margin %v)", waited, short, fencestore.AbandonMargin)
		if waited < short+fencestore.AbandonMargin {
			t.Fatalf("11 gave 10 up after %v, before 10's bound and the margin (%v)", waited, short+fencestore.AbandonMargin)
		}
		s.Release(newer)
		later := fly(t, s, fencestore.Admission{Resource: "b/5", Token: 12, Compare: ge})
		defer s.Release(later)
		if later.Older {
			t.Fatal("12 finds an older request in flight: 10's entry was not removed when 11 gave it up, or 11's release not applied")
		}
	})

	t.Run("WaitsOnlyForItsSnapshot", func(t *testing.T) {
		// (42, 1) waits for the unsequenced 42 in flight when it was
		// admitted, never for one admitted after it, though that one is
		// ordered before it: a stream of such requests cannot starve it.
		first := fly(t, s, fencestore.Admission{Resource: "b/8", Token: 42, Compare: ge})
		s1 := fly(t, s, fencestore.Admission{Resource: "b/8", Token: 42, Sequence: 1, HasSequence: true})
		if !s1.Older {
			t.Fatal("(42, 1) admitted while an unsequenced 42 is in flight: Older not set")
		}
		ch := drainAsync(s, ctxT(t), s1)
		stillWaiting(t, ch, "(42, 1) behind the unsequenced 42")
		second := fly(t, s, fencestore.Admission{Resource: "b/8", Token: 42, Compare: ge})
		defer s.Release(second)
		stillWaiting(t, ch, "(42, 1) behind the first unsequenced 42")
		s.Release(first)
		released(t, ch, "(42, 1) after the 42 of its snapshot, though another 42 admitted after it is in flight", false)
		s.Release(s1)
	})

	t.Run("WaitsForEachOfItsSnapshot", func(t *testing.T) {
		// 3 waits for 1 and 2, released in the other order; a release of
		// a request outside its snapshot (an equal 3) changes nothing.
		f1 := fly(t, s, fencestore.Admission{Resource: "b/9", Token: 1, Compare: ge})
		f2 := fly(t, s, fencestore.Admission{Resource: "b/9", Token: 2, Compare: ge})
		f3 := fly(t, s, fencestore.Admission{Resource: "b/9", Token: 3, Compare: ge})
		other := fly(t, s, fencestore.Admission{Resource: "b/9", Token: 3, Compare: ge})
		ch := drainAsync(s, ctxT(t), f3)
		stillWaiting(t, ch, "3 behind 1 and 2")
		s.Release(other)
		stillWaiting(t, ch, "3 behind 1 and 2, after an equal 3 left")
		s.Release(f2)
		stillWaiting(t, ch, "3 behind 1")
		s.Release(f1)
		released(t, ch, "3 after 1 and 2", false)
		s.Release(f3)
	})

	t.Run("RefusedAndUnfencedDoNotRegister", func(t *testing.T) {
		fifty := fly(t, s, fencestore.Admission{Resource: "b/6", Token: 50, Compare: ge})
		d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "b/6", Token: 49, Compare: ge, Flight: flightFor})
		if err != nil || d.Admitted || d.Flight.Registered() {
			t.Fatalf("stale 49 = %+v, %v; want refused without a registration", d, err)
		}
		s.Release(fifty)
		// Without Flight nothing registers: 52 does not wait for 51.
		if _, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "b/6", Token: 51, Compare: ge}); err != nil {
			t.Fatal(err)
		}
		f := fly(t, s, fencestore.Admission{Resource: "b/6", Token: 52, Compare: ge})
		defer s.Release(f)
		if f.Older {
			t.Fatal("52 waits for a request refused (49) or admitted without the barrier (51)")
		}
	})

	t.Run("ChainOfGenerations", func(t *testing.T) {
		// 1 < 2 < 3 all in flight: 3 waits for both, 2 for 1.
		f1 := fly(t, s, fencestore.Admission{Resource: "b/7", Token: 1, Compare: ge})
		f2 := fly(t, s, fencestore.Admission{Resource: "b/7", Token: 2, Compare: ge})
		f3 := fly(t, s, fencestore.Admission{Resource: "b/7", Token: 3, Compare: ge})
		ch2, ch3 := drainAsync(s, ctxT(t), f2), drainAsync(s, ctxT(t), f3)
		stillWaiting(t, ch2, "2 behind 1")
		s.Release(f1)
		released(t, ch2, "2 after 1", false)
		stillWaiting(t, ch3, "3 behind 2")
		s.Release(f2)
		released(t, ch3, "3 after 2", false)
		s.Release(f3)
	})
}
