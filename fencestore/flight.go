package fencestore

import (
	"context"
	"sync"
	"sync/atomic"
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

// AbandonMargin is added to an older request's flight bound before a waiter whose
// process has watched it that long, on its own monotonic clock, treats it as
// abandoned: it covers the time between the owner's admission and the first
// sighting, and clocks that run at slightly different rates.
const AbandonMargin = time.Second

// Flight is one admitted request's place in the barrier. Stores fill it;
// callers only read Older and hand it back to Drain and Release.
type Flight struct {
	// Older is set when a request for the same resource ordered before this
	// one was in flight when it was admitted: call Drain before forwarding.
	Older bool
	// Key, Ref and Seq identify the registration to the store that made
	// it (the Redis store: the in-flight key and the member; etcd: the
	// in-flight key, and the admission's revision in Seq; LocalFlights:
	// the resource and the registration number in Seq).
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

// The waiting rule. A request waits only for the older requests that were
// in flight when it was admitted (its snapshot), never for one admitted
// after it, whatever its order: a stream of later requests cannot starve
// it. An older request stops holding it back when its owner releases it,
// or once the waiter's process has watched it, on its own monotonic clock
// since the earliest admission of a waiter that found it in flight (the
// memory and bolt stores: since; Redis and etcd: Watched),
// for the older request's flight bound (Admission.Flight) plus
// AbandonMargin: its owner is then taken to have died, frozen or lost the
// store, and the waiter removes its record. No wall clock decides (neither
// the store's nor a replica's), and nothing the barrier needs expires by a
// store's TTL; what remains assumed is that the owner's and the waiter's
// clocks run at about the same rate.

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
//
// Settle takes the admitted request's snapshot: the entries ordered before
// it that are registered at that moment. Its Drain waits for those alone,
// so requests admitted later never hold it back, whatever their order (no
// starvation). Each entry has a channel of its own, closed when it leaves:
// a release wakes only the waiters blocked on that entry, never every
// waiter of the resource.
//
// Nothing here reads the wall clock: every instant is a time.Time taken
// with time.Now in this process and never stripped of its monotonic
// reading, and the only durations measured are between two such
// instants. A waiter treats an entry of its snapshot as abandoned once it
// has watched it for the entry's bound (Admission.Flight) plus
// AbandonMargin, from the first Settle whose snapshot listed it (since:
// every waiter continues that one observation); it then removes the entry,
// as the owner's release would, and Drain reports expired.
type LocalFlights struct {
	mu sync.Mutex
	// res holds the entries in flight of each resource, by registration
	// number: what Settle scans for older entries.
	res map[string]map[uint64]*localFlight
	// own holds every registration until its owner releases it, even once
	// a waiter abandoned it (removed it from res): its snapshot is still
	// what its own Drain waits for.
	own  map[uint64]*localFlight
	next uint64
	// wakes counts the times a blocked Drain woke up, for the tests that
	// check that a release wakes only the waiters whose snapshot holds it.
	wakes atomic.Uint64
}

type localFlight struct {
	key   string // its resource
	id    uint64 // its registration number
	order Mark
	bound time.Duration
	// gone is closed when the entry leaves res: released by its owner, or
	// abandoned by a waiter.
	gone chan struct{}
	// Set by Settle, read-only after: when the owner learned of its
	// snapshot (its waiter's watch begins there), and the snapshot.
	seen  time.Time
	older []*localFlight
	// since is when the first Settle whose snapshot listed this entry
	// learned of it: every waiter of the process times the entry from
	// there (set once, under mu, by that Settle).
	since time.Time
}

// Begin registers a as in flight for a.Flight, before the store decides it.
// It returns the zero Flight when a.Flight is not above zero.
func (l *LocalFlights) Begin(a Admission) Flight {
	if a.Flight <= 0 {
		return Flight{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.res == nil {
		l.res = make(map[string]map[uint64]*localFlight)
		l.own = make(map[uint64]*localFlight)
	}
	set := l.res[a.Resource]
	if set == nil {
		set = make(map[uint64]*localFlight, 1)
		l.res[a.Resource] = set
	}
	l.next++
	e := &localFlight{key: a.Resource, id: l.next, order: a.Order(), bound: a.Flight, gone: make(chan struct{})}
	set[l.next] = e
	l.own[l.next] = e
	return Flight{Key: a.Resource, Seq: l.next, Order: a.Order()}
}

// Settle finishes an admission that Begin registered: an admitted request
// keeps its registration and takes its snapshot of the older entries in
// flight; a refused or failed one is released at once.
func (l *LocalFlights) Settle(f Flight, d Decision, err error) (Decision, error) {
	if !f.Registered() {
		return d, err
	}
	if err != nil || !d.Admitted {
		l.Release(f)
		return d, err
	}
	l.mu.Lock()
	e := l.own[f.Seq]
	if e == nil { // released before it was settled: nothing to wait for
		l.mu.Unlock()
		d.Flight = f
		return d, nil
	}
	e.seen = time.Now()
	for id, o := range l.res[f.Key] {
		if id != f.Seq && o.order.Before(f.Order) {
			e.older = append(e.older, o)
			if o.since.IsZero() {
				o.since = e.seen
			}
		}
	}
	l.mu.Unlock()
	f.Older = len(e.older) > 0
	d.Flight = f
	return d, nil
}

// Drain waits until every entry of f's snapshot has left: released by its
// owner, or abandoned once this process has watched it for its bound plus
// AbandonMargin since the first Settle that listed it (since). Waiting for the entries one after the other is
// waiting for all of them: each has its own absolute time of abandonment.
func (l *LocalFlights) Drain(ctx context.Context, f Flight) (bool, error) {
	if !f.Older {
		return false, nil
	}
	l.mu.Lock()
	e := l.own[f.Seq]
	l.mu.Unlock()
	if e == nil {
		return false, nil // released already: it waits for nothing
	}
	expired := false
	for _, o := range e.older {
		select {
		case <-o.gone:
			continue
		default:
		}
		t := time.NewTimer(time.Until(o.since.Add(o.bound + AbandonMargin)))
		select {
		case <-o.gone:
			l.wakes.Add(1)
		case <-t.C:
			l.wakes.Add(1)
			l.remove(o)
			expired = true
		case <-ctx.Done():
			t.Stop()
			return expired, ctx.Err()
		}
		t.Stop()
	}
	return expired, nil
}

// Release ends f's flight and wakes the waiters whose snapshot holds it.
func (l *LocalFlights) Release(f Flight) {
	if !f.Registered() {
		return
	}
	l.mu.Lock()
	e := l.own[f.Seq]
	delete(l.own, f.Seq)
	l.mu.Unlock()
	if e != nil {
		l.remove(e)
	}
}

// remove takes e out of its resource's entries and closes its channel,
// once: the owner's release and a waiter's abandonment may both come.
func (l *LocalFlights) remove(e *localFlight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-e.gone:
		return
	default:
	}
	close(e.gone)
	set := l.res[e.key]
	delete(set, e.id)
	if len(set) == 0 {
		delete(l.res, e.key)
	}
}
