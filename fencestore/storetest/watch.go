package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// testWatchContinues: a process times an older request from when it first
// saw it in flight, not from each waiter's admission. The first waiter of
// 41 gives up early (its client went away); a second, admitted a bound
// later, finds 41 abandoned a margin after the first sighting, long before
// its own admission plus the bound and the margin, which its context is
// shorter than.
func testWatchContinues(t *testing.T, s fencestore.Store) {
	const (
		bound = 2 * time.Second
		gap   = 2 * time.Second
	)
	fly(t, s, fencestore.Admission{Resource: "watch/1", Token: 41, Flight: bound}) // never released: its owner died
	first := fly(t, s, fencestore.Admission{Resource: "watch/1", Token: 42})
	if !first.Older {
		t.Fatal("42 does not see 41 in flight")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if exp, err := s.Drain(ctx, first); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first waiter's Drain = (%v, %v), want its context's end while 41 is in flight", exp, err)
	}
	time.Sleep(gap)
	// Equal orders never wait for each other: the second waits for 41
	// alone.
	second := fly(t, s, fencestore.Admission{Resource: "watch/1", Token: 42})
	if !second.Older {
		t.Fatal("the second 42 does not see 41 in flight")
	}
	// 41 is abandoned bound+AbandonMargin after the first sighting, that
	// is about bound+AbandonMargin-gap from now; timed from this
	// admission it would be bound+AbandonMargin from now.
	ctx, cancel = context.WithTimeout(t.Context(), bound+fencestore.AbandonMargin-gap/4)
	defer cancel()
	exp, err := s.Drain(ctx, second)
	if err != nil || !exp {
		t.Fatalf("second waiter's Drain = (%v, %v); want (true, nil): 41 abandoned from its first sighting, not watched again from this admission", exp, err)
	}
	s.Release(first)
	s.Release(second)
}
