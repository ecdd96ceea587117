package proxy

import (
	"context"
	"sync/atomic"
	"time"
)

// flightDeadlines hands out the upstream deadline of the requests in
// flight (forwardAdmitted) without a context, a timer and a cancel hook
// per request: every request that started within the same millisecond of
// the grid (deadlineGrain, counted on the monotonic clock from the moment
// the proxy was made) shares one context.WithDeadline whose deadline is the
// start of that millisecond plus FENCE_UPSTREAM_TIMEOUT. A request gets at
// most the timeout from its start, never more, and at most one millisecond
// less: the drain barrier's in-flight bound (the timeout from admission,
// later than the start) holds as with a context of its own.
//
// A shared context ends at its deadline, or earlier once every request
// that took it is done and a later millisecond has taken its slot (a
// count of users, the slot's own reference among them): under load the
// contexts of the last few milliseconds are live, not those of the whole
// timeout. A request that finds a later millisecond in its slot (it
// started long before it reached the upstream) makes a context of its own.
type flightDeadlines struct {
	timeout time.Duration
	grain   time.Duration // deadlineGrain; a test may set another
	epoch   time.Time     // with a monotonic reading: time.Now()
	slots   [flightSlots]atomic.Pointer[flightDeadline]
}

// flightSlots is how many milliseconds of the grid are shared at once: a
// request reaches the upstream after its admission's round trip, which
// with a store that syncs to disk (Redis appendfsync always, etcd) takes
// several milliseconds under load; 64 keeps those requests sharing too,
// for 64 pointers.
const flightSlots = 64

type flightDeadline struct {
	context.Context
	cancel context.CancelFunc
	grain  int64 // the millisecond of the grid it serves
	// users counts the requests that took it and are not done, plus one
	// while it is in its slot; at zero it is cancelled and never handed
	// out again.
	users atomic.Int64
}

func newFlightDeadlines(timeout time.Duration) *flightDeadlines {
	return &flightDeadlines{timeout: timeout, grain: deadlineGrain, epoch: time.Now()}
}

// take returns the shared deadline context of a request that started at
// start (a time.Now() reading), or nil when it must make its own; the
// caller calls done on it once the request is over.
func (f *flightDeadlines) take(start time.Time) *flightDeadline {
	n := start.Sub(f.epoch)
	if n < 0 {
		return nil
	}
	g := int64(n / f.grain)
	slot := &f.slots[g%flightSlots]
	for {
		d := slot.Load()
		switch {
		case d != nil && d.grain == g:
			if d.acquire() {
				return d
			}
			return nil
		case d != nil && d.grain > g:
			return nil // a later millisecond holds the slot
		}
		// The grid's millisecond start, on the monotonic clock as start is:
		// the context's timer runs on it too.
		at := start.Add(time.Duration(g)*f.grain - n + f.timeout)
		ctx, cancel := context.WithDeadline(context.Background(), at)
		nd := &flightDeadline{Context: ctx, cancel: cancel, grain: g}
		nd.users.Store(2) // the slot's reference and this request's
		if slot.CompareAndSwap(d, nd) {
			if d != nil {
				d.done() // the slot's reference to the millisecond it replaced
			}
			return nd
		}
		cancel() // another request installed one first: take that
	}
}

// acquire counts one more user, unless the context was already let go.
func (d *flightDeadline) acquire() bool {
	for {
		n := d.users.Load()
		if n == 0 {
			return false
		}
		if d.users.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// done counts one user less, and cancels the context when it was the last
// (its timer and its hooks freed before the deadline).
func (d *flightDeadline) done() {
	if d.users.Add(-1) == 0 {
		d.cancel()
	}
}
