package fencestore

import (
	"context"
	"sync"
	"time"
)

// The drain barrier. Admission orders generations, but a request admitted
// with token 41 just before 42 was admitted can still be on its way to (or
// running in) the upstream when 42's request arrives there. So an admitted
// request is in flight until its exchange with the upstream is over, or its
// upstream deadline passed; a request sends nothing upstream while a request
// for the same resource ordered before it is in flight. Equal orders never
// wait for each other.
//
// The order of a request is its (token, sequence) pair, compared token
// first; a request without a sequence comes before every request of its
// token that has one (Mark.Before).

// AbandonMargin is added to an older request's flight bound before a waiter that has
// watched it that long, on its own monotonic clock, treats it as abandoned: it covers
// the time between the owner's admission and the waiter's, and clocks that run at
// slightly different rates.
const AbandonMargin = time.Second

// Flight is one admitted request's place in the barrier. Stores fill it;
// callers only read Older and Expired and hand it back to Drain and Release.
type Flight struct {
	// Older is set when a request for the same resource ordered before this
	// one was in flight when it was admitted: call Drain before forwarding.
	Older bool
	// Expired counts the older requests the store found past their
	// deadlines (and dropped) when it admitted this one.
	Expired int
	// Key and Ref identify the registration to the store that made it (the
	// Redis store: the in-flight key and the member; LocalFlights: the
	// resource and the registration number in Seq).
	Key, Ref string
	Seq      uint64
	// Order is the request's place in the order.
	Order Mark
}

// Registered reports whether f is a registration (not the zero Flight).
func (f Flight) Registered() bool { return f.Key != "" || f.Seq != 0 }

// Before reports whether m comes before o in the barrier's order: a lower
// token, or an equal token and then no sequence before any sequence, a lower
// sequence before a higher one.
func (m Mark) Before(o Mark) bool {
	switch {
	case m.Token != o.Token:
		return m.Token < o.Token
	case m.HasSequence != o.HasSequence:
		return !m.HasSequence
	}
	return m.HasSequence && m.Sequence < o.Sequence
}

// Order returns the place a takes in the barrier's order.
func (a Admission) Order() Mark {
	return Mark{Token: a.Token, Sequence: a.Sequence, HasSequence: a.HasSequence}
}

// LocalFlights is the drain barrier within one process, for the stores whose
// marks live in the process (memory, bolt): only one process admits against
// them, so the barrier needs no store round trip. The zero value is ready.
//
// A store calls Begin before it decides an admission and Settle after: an
// admission registered before its own decision is seen by every admission
// decided after it, so an older request admitted just before a newer one is
// always found, however their goroutines interleave afterwards.
type LocalFlights struct {
	mu   sync.Mutex
	res  map[string]*localFlights
	next uint64
}

type localFlights struct {
	entries map[uint64]localFlight
	// wake is closed (and replaced) when an entry leaves while someone
	// waits: the waiters then look again.
	wake chan struct{}
}

type localFlight struct {
	order    Mark
	deadline time.Time
}

// Begin registers a as in flight for a.Flight, before the store decides it.
// It returns the zero Flight when a.Flight is not above zero.
func (l *LocalFlights) Begin(a Admission) Flight {
	if a.Flight <= 0 {
		return Flight{}
	}
	deadline := time.Now().Add(a.Flight)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.res == nil {
		l.res = make(map[string]*localFlights)
	}
	set := l.res[a.Resource]
	if set == nil {
		set = &localFlights{entries: make(map[uint64]localFlight, 1)}
		l.res[a.Resource] = set
	}
	l.next++
	set.entries[l.next] = localFlight{order: a.Order(), deadline: deadline}
	return Flight{Key: a.Resource, Seq: l.next, Order: a.Order()}
}

// Settle finishes an admission that Begin registered: an admitted request
// keeps its registration, and learns whether an older one is in flight; a
// refused or failed one is released at once.
func (l *LocalFlights) Settle(f Flight, d Decision, err error) (Decision, error) {
	if !f.Registered() {
		return d, err
	}
	if err != nil || !d.Admitted {
		l.Release(f)
		return d, err
	}
	l.mu.Lock()
	older, expired, _ := l.scan(f, time.Now())
	l.mu.Unlock()
	f.Older, f.Expired = older, expired
	d.Flight = f
	return d, nil
}

// scan reports whether a live entry ordered before f is in f's set, and the
// earliest deadline among those; it drops the entries past their deadline
// (counting the older ones). l.mu is held.
func (l *LocalFlights) scan(f Flight, now time.Time) (older bool, expired int, next time.Time) {
	set := l.res[f.Key]
	if set == nil {
		return false, 0, next
	}
	for id, e := range set.entries {
		if !now.Before(e.deadline) {
			delete(set.entries, id)
			if e.order.Before(f.Order) {
				expired++
			}
			continue
		}
		if e.order.Before(f.Order) {
			older = true
			if next.IsZero() || e.deadline.Before(next) {
				next = e.deadline
			}
		}
	}
	return older, expired, next
}

// Drain waits until no entry ordered before f is in flight: each release
// wakes it, and the earliest older deadline ends its wait when nothing is
// released.
func (l *LocalFlights) Drain(ctx context.Context, f Flight) (bool, error) {
	expired := false
	for {
		l.mu.Lock()
		older, n, next := l.scan(f, time.Now())
		expired = expired || n > 0
		if !older {
			l.mu.Unlock()
			return expired, nil
		}
		set := l.res[f.Key]
		if set.wake == nil {
			set.wake = make(chan struct{})
		}
		wake := set.wake
		l.mu.Unlock()

		t := time.NewTimer(time.Until(next))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return expired, ctx.Err()
		}
		t.Stop()
	}
}

// Release ends f's flight and wakes whoever waits on its resource.
func (l *LocalFlights) Release(f Flight) {
	if !f.Registered() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.res[f.Key]
	if set == nil {
		return
	}
	delete(set.entries, f.Seq)
	if set.wake != nil {
		close(set.wake)
		set.wake = nil
	}
	if len(set.entries) == 0 {
		delete(l.res, f.Key)
	}
}
