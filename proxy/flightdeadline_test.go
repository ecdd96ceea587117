package proxy

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// Requests that start within the same millisecond of the grid share one
// upstream deadline context; its deadline is never later than the start
// plus the timeout (the drain barrier's in-flight bound), and at most one
// grain earlier; a request that finds a later millisecond in its slot
// gets none (it makes its own).
func TestFlightDeadlinesShared(t *testing.T) {
	const timeout = 30 * time.Second
	f := newFlightDeadlines(timeout)
	t0 := f.epoch.Add(10 * deadlineGrain) // the start of a millisecond of the grid
	first := f.take(t0)
	tests := []struct {
		name  string
		at    time.Duration // after t0
		share bool          // gets first's context
		none  bool          // gets no shared context
	}{
		{"same instant", 0, true, false},
		{"within the grain", deadlineGrain / 2, true, false},
		{"last nanosecond of the grain", deadlineGrain - 1, true, false},
		{"next grain", deadlineGrain, false, false},
		{"a later grain in the same slot", flightSlots * deadlineGrain, false, false},
		{"an earlier grain than its slot holds", 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := t0.Add(tc.at)
			d := f.take(start)
			if d == nil {
				if !tc.none {
					t.Fatal("no shared context")
				}
				return
			}
			defer d.done()
			if tc.none {
				t.Fatalf("a shared context of grain %d for a request of grain %d", d.grain, 10)
			}
			if (d == first) != tc.share {
				t.Fatalf("shares the first context: %v, want %v", d == first, tc.share)
			}
			dl, ok := d.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			if budget := dl.Sub(start); budget > timeout || budget <= timeout-deadlineGrain {
				t.Fatalf("budget %v, want within (%v, %v]", budget, timeout-deadlineGrain, timeout)
			}
		})
	}
	first.done()
}

// A shared context is let go (cancelled, its timer freed) once every
// request that took it is done and a later millisecond took its slot, not
// before; until its deadline otherwise.
func TestFlightDeadlinesLetGo(t *testing.T) {
	f := newFlightDeadlines(time.Hour)
	t0 := f.epoch.Add(3 * deadlineGrain)
	a := f.take(t0)
	b := f.take(t0.Add(deadlineGrain / 2))
	if a != b {
		t.Fatal("two requests of one millisecond got two contexts")
	}
	a.done()
	if a.Err() != nil {
		t.Fatal("cancelled while a request still has it")
	}
	b.done()
	if a.Err() != nil {
		t.Fatal("cancelled while still in its slot")
	}
	c := f.take(t0.Add(flightSlots * deadlineGrain)) // the same slot, later
	if c == a || a.Err() != context.Canceled {
		t.Fatalf("after its slot was taken and its requests done: err %v", a.Err())
	}
	c.done()
	if c.Err() != nil {
		t.Fatal("the slot's current context was let go")
	}
	if d := f.take(t0); d != nil {
		t.Fatal("a let-go millisecond handed out again")
	}
}

// The shared context really ends at its deadline.
func TestFlightDeadlinesExpire(t *testing.T) {
	f := newFlightDeadlines(time.Millisecond)
	d := f.take(time.Now())
	if d == nil {
		t.Fatal("no shared context")
	}
	defer d.done()
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream deadline never ended")
	}
	if d.Err() != context.DeadlineExceeded {
		t.Fatalf("Err = %v, want the deadline", d.Err())
	}
}

type clientValueKey struct{}

// The forward of a request in flight, on a shared deadline, still sees the
// values of the client's context (a deadline shared by several requests
// carries none of them), and not the client's cancellation.
func TestExchangeKeepsClientValues(t *testing.T) {
	f := newFlightDeadlines(time.Hour)
	d := f.take(time.Now())
	defer d.done()
	client, cancel := context.WithCancel(context.WithValue(context.Background(), clientValueKey{}, "v"))
	x := &exchange{Context: d, client: client}
	r, _ := http.NewRequestWithContext(x, "PUT", "http://upstream/", nil)
	cancel()
	if got := r.Context().Value(clientValueKey{}); got != "v" {
		t.Fatalf("client value = %v through the exchange", got)
	}
	if exchangeOf(r) != x || x.Err() != nil {
		t.Fatalf("exchange %p, err %v; want x, not cancelled with its client", exchangeOf(r), x.Err())
	}
	// A context derived from the exchange attaches to the shared deadline
	// (the context package's key answered by it, not by the client's).
	child, stop := context.WithCancel(x)
	defer stop()
	if child.Err() != nil {
		t.Fatal("a child of the exchange ended with the client")
	}
	// Attached, the shared deadline's end reaches the child at once (a
	// child attached to anything else would learn it later, if at all).
	d.cancel()
	if child.Err() == nil {
		t.Fatal("the shared deadline ended, and a child of the exchange did not with it")
	}
}
