package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The drain barrier in etcd (doc.go has the layout). The admission
// transaction puts the admitted request's in-flight key, its flight bound
// as the value, and reads the keys of its resource ordered before it: the
// snapshot its Drain waits for (flightwatch.go), which this store keeps
// beside the Flight until it is released. Release deletes the key in the
// background (with the next batch, batch.go), and a failed deletion is
// sent again until etcd acknowledges it or the record's lease has
// collected it (releaseUntil): a request admitted at any time before then
// may find it and wait for it. A replica that never releases (dead, frozen, cut off) holds each
// waiter back until that waiter has watched its record, on its own
// monotonic clock, for the record's bound plus fencestore.AbandonMargin;
// the waiter then deletes the record itself. No etcd clock decides: the
// records carry a lease only so that etcd collects those nobody waits for,
// gcAfter beyond any bound.

const (
	// gcAfter is added to a flight's whole seconds to make its lease's
	// TTL: the lease only collects records that nobody released or
	// abandoned (a replica that died with no other waiting), far beyond
	// any waiter's bound, so that etcd's clock never decides the barrier.
	gcAfter = 48 * time.Hour
	// renewAfter is the age at which a lease in use has its successor
	// granted in the background: so a record's lease has at least
	// gcAfter-renewAfter (a day) beyond its flight left when it is put.
	renewAfter = gcAfter / 2
	// grantTimeout bounds a lease grant (admissions waiting for it are
	// bounded by their own contexts).
	grantTimeout = 5 * time.Second
	// regrantAfter is how long a grant may run before an admission that
	// needs a lease starts another beside it: a grant sent into an
	// election can wait for the server's own timeout, long after a new
	// leader would answer a new one.
	regrantAfter = 250 * time.Millisecond
	// releaseTimeout bounds one attempt of a transaction of releases
	// alone; a failed one is tried again (batch.go).
	releaseTimeout = 2 * time.Second
	// maxLeaseTTL is etcd's largest lease TTL (seconds).
	maxLeaseTTL = 9_000_000_000
	// grantAttempts bounds the grants one admission may wait for: a
	// cluster whose grants keep failing fails the admission.
	grantAttempts = 3
)

// lease is one etcd lease this store attaches in-flight keys to.
type lease struct {
	id clientv3.LeaseID
	// sent is when the grant was sent: etcd times the lease from a moment
	// after it, so sent+ttl is no later than the real expiry.
	sent time.Time
	ttl  time.Duration // as etcd granted it
}

// covers reports whether a flight that begins now ends before the lease
// can expire.
func (l *lease) covers(now time.Time, flight time.Duration) bool {
	return !now.Add(flight).After(l.sent.Add(l.ttl))
}

// leases keeps the lease of each TTL in use: one lease serves every
// admission whose flight it covers, so a replica grants one lease a day
// per distinct flight length while it admits (one every renewAfter), and
// none while idle.
type leases struct {
	s       *Store
	mu      sync.Mutex
	buckets map[int64]*bucket // by requested TTL in seconds
}

type bucket struct {
	cur     *lease
	pending *grant // the grant under way, nil none
}

type grant struct {
	started time.Time
	done    chan struct{}
	err     error
}

// ttlFor is the TTL, in whole seconds, of the lease for a flight: rounded
// up, plus gcAfter.
func ttlFor(flight time.Duration) int64 {
	sec := int64(flight / time.Second)
	if flight%time.Second != 0 {
		sec++
	}
	return min(sec+int64(gcAfter/time.Second), maxLeaseTTL)
}

// get returns a lease that covers a flight beginning now.
func (ls *leases) get(ctx context.Context, flight time.Duration) (*lease, error) {
	ttl := ttlFor(flight)
	for range grantAttempts {
		ls.mu.Lock()
		if ls.buckets == nil {
			ls.buckets = make(map[int64]*bucket)
		}
		b := ls.buckets[ttl]
		if b == nil {
			b = &bucket{}
			ls.buckets[ttl] = b
		}
		now := time.Now()
		if l := b.cur; l != nil && l.covers(now, flight) {
			if b.pending == nil && now.Sub(l.sent) >= renewAfter {
				ls.grant(ttl, b) // the successor, in the background
			}
			ls.mu.Unlock()
			return l, nil
		}
		if (b.pending == nil || now.Sub(b.pending.started) >= regrantAfter) && !ls.grant(ttl, b) {
			ls.mu.Unlock()
			return nil, errClosed
		}
		g := b.pending
		ls.mu.Unlock()
		select {
		case <-g.done:
		case <-ctx.Done():
			return nil, ls.s.fail(ctx, "lease grant", ctx.Err())
		case <-ls.s.done:
			return nil, errClosed
		}
		if g.err != nil {
			return nil, ls.s.fail(ctx, "lease grant", g.err)
		}
	}
	return nil, fencestore.Unavailable(fmt.Errorf("etcdstore: no lease granted in %d attempts for a flight of %v", grantAttempts, flight))
}

// grant starts granting a lease of ttl seconds for b. ls.mu is held.
func (ls *leases) grant(ttl int64, b *bucket) bool {
	g := &grant{started: time.Now(), done: make(chan struct{})}
	prev := b.pending
	b.pending = g
	ok := ls.s.goBackground(func() {
		ctx, cancel := context.WithTimeout(ls.s.bgCtx, grantTimeout)
		defer cancel()
		sent := time.Now()
		resp, err := ls.s.client.Grant(ctx, ttl)
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if err == nil && (b.cur == nil || b.cur.sent.Before(sent)) {
			b.cur = &lease{id: resp.ID, sent: sent, ttl: time.Duration(resp.TTL) * time.Second}
		}
		g.err = err
		if b.pending == g {
			b.pending = nil
		}
		close(g.done)
		ls.sweep(sent)
	})
	if !ok {
		b.pending = prev
	}
	return ok
}

// sweep forgets the buckets whose lease has expired and that nothing
// grants for. ls.mu is held.
func (ls *leases) sweep(now time.Time) {
	for ttl, b := range ls.buckets {
		if b.pending == nil && (b.cur == nil || now.After(b.cur.sent.Add(b.cur.ttl))) {
			delete(ls.buckets, ttl)
		}
	}
}

// drop forgets l, which etcd does not have.
func (ls *leases) drop(l *lease) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, b := range ls.buckets {
		if b.cur == l {
			b.cur = nil
		}
	}
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}

// ours reports whether f is a registration of a store with this layout.
func (s *Store) ours(f fencestore.Flight) bool {
	_, _, ok := olderRange(f.Key)
	return ok && strings.HasPrefix(f.Key, s.keys.inflight)
}

// ownFlight is what a store keeps of one of its admitted requests until it
// is released: what its Drain waits for, and when its release is moot.
type ownFlight struct {
	rng string // its resource's flight range (flightwatch.go)
	rev int64  // the revision of its admission
	// seen is when the admission's reply arrived here: its waiter's watch
	// of the snapshot begins there (a monotonic reading, never stripped).
	seen  time.Time
	bound time.Duration
	// older is the snapshot: the in-flight keys ordered before it when it
	// was admitted, each with its bound.
	older map[string]time.Duration
}

// barrier is a store's side of the drain barrier: its own flights, and the
// watches its waiters share (flightwatch.go).
type barrier struct {
	mu       sync.Mutex
	own      map[string]*ownFlight // by in-flight key
	watchers map[string]*watcher   // by flight range
}

// track keeps f's flight, admitted at rev, until it is released.
func (b *barrier) track(key string, o *ownFlight) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.own == nil {
		b.own = make(map[string]*ownFlight)
	}
	b.own[key] = o
}

func (b *barrier) get(key string) *ownFlight {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.own[key]
}

func (b *barrier) untrack(key string) *ownFlight {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.own[key]
	delete(b.own, key)
	return o
}

// parseBound reads an in-flight record's value: its flight bound in
// nanoseconds, canonical decimal. A record without one is timed with the
// waiter's own bound (a replica whose records carry none).
func parseBound(v []byte, fallback time.Duration) time.Duration {
	n, ok := fencestore.ParseMark(v)
	if !ok || n == 0 || n > math.MaxInt64 {
		return fallback
	}
	return time.Duration(n)
}

// boundValue is an in-flight record's value for a flight bound.
func boundValue(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }

// settle finishes an admission with a flight once its batch answered: an
// admitted one keeps its snapshot (the older records read in its
// transaction) until released; one that failed, and whose transaction may
// have put its record (a timeout, a reply of the wrong shape), releases
// the record, which would otherwise hold the next requests back.
func (s *Store) settle(q *queued, d fencestore.Decision, err error) {
	fl := q.p.fl
	if fl == nil {
		return
	}
	if err == nil {
		if d.Flight.Registered() {
			s.flights.track(fl.key, &ownFlight{rng: s.keys.flightRange(q.p.a.Resource), rev: q.reply.rev,
				seen: time.Now(), bound: q.p.a.Flight, older: fl.older})
		}
		return
	}
	var lost *fencestore.LostError
	if q.reply.unsent || isLeaseNotFound(err) || errors.As(err, &lost) {
		return // etcd applied nothing of it
	}
	s.batch.release(fl.key, releaseUntil(time.Now(), q.p.a.Flight))
}

// late releases the record of an admission whose caller gave up before its
// batch answered (past FENCE_STORE_TIMEOUT: the request got 503 and was not
// forwarded), once the batch answers: the transaction may have been
// applied, and its record put, after the caller left. Releasing only then
// keeps the deletion behind the put.
func (s *Store) late(q *queued) {
	if q.p.fl == nil {
		return
	}
	s.goBackground(func() {
		<-q.done
		if !q.reply.unsent && !q.reply.lost {
			s.batch.release(q.p.fl.key, releaseUntil(time.Now(), q.p.a.Flight))
		}
	})
}

// Release forgets f's snapshot and queues its in-flight key for deletion:
// nobody waits for it. The deletion rides the next batch (batch.go), so
// that under load a release costs a fraction of an etcd write; one that
// fails is sent again, with backoff, until etcd acknowledges it or the
// record can hold nobody back any more (releaseUntil). Releases still
// queued when the store closes are sent once (flush); one that fails then
// holds each waiter until it abandons the record on its own clock, and
// its lease collects it after gcAfter.
func (s *Store) Release(f fencestore.Flight) {
	if !f.Registered() || !s.ours(f) {
		return
	}
	moot := releaseUntil(time.Now(), 0)
	if o := s.flights.untrack(f.Key); o != nil {
		moot = releaseUntil(o.seen, o.bound)
	}
	s.batch.release(f.Key, moot)
}

// Drain waits until every record of f's snapshot (the older records in
// flight when f was admitted) is deleted, or has been watched by this
// waiter, on its own monotonic clock, since f's admission reply, for its
// bound plus fencestore.AbandonMargin; such a record is abandoned: Drain
// queues its deletion and reports expired. Records put after f's
// admission never hold it back. The waiters of one resource in this
// process share one watch (flightwatch.go): a deletion wakes only the
// waiters whose snapshot holds it, and costs the others nothing.
func (s *Store) Drain(ctx context.Context, f fencestore.Flight) (bool, error) {
	if !f.Older {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if s.isClosed() {
		return false, errClosed
	}
	if !s.ours(f) {
		return false, fencestore.Unavailable(fmt.Errorf("etcdstore: drain: %q is not an in-flight key of this store", f.Key))
	}
	o := s.flights.get(f.Key)
	if o == nil {
		return false, nil // released already: it waits for nothing
	}
	w, err := s.join(o.rng)
	if err != nil {
		return false, err
	}
	defer s.leave(w)
	wt := &waiter{remaining: maps.Clone(o.older), abandonAt: make(map[string]time.Time, len(o.older)), wake: make(chan struct{}, 1)}
	for key, bound := range o.older {
		wt.abandonAt[key] = s.watched.AbandonAt(key, o.seen, bound)
	}
	check := w.register(wt, o.rev)
	defer w.unregister(wt)
	if check {
		// The shared watch began after f's admission: a deletion between
		// the two is in no event, so read what remains of the snapshot.
		if err := w.check(ctx, w.keys(wt)); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return false, cerr
			}
			return false, s.fail(ctx, "drain", err)
		}
	}
	expired := false
	for {
		left, next := w.pending(wt)
		if left == 0 {
			return expired, nil
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-wt.wake:
		case <-t.C:
			for key, bound := range w.due(wt) {
				expired = true
				s.batch.release(key, releaseUntil(time.Now(), bound))
			}
		case <-ctx.Done():
			t.Stop()
			return expired, ctx.Err()
		case <-s.done:
			t.Stop()
			return expired, errClosed
		}
		t.Stop()
	}
}

// releaseUntil is when the deletion of a record put at start with bound
// is given up: its lease, gcAfter past its bound, has collected it by
// then. Not at the bound: a request admitted after an outage longer than
// the bound finds the record and watches it from its own admission, so a
// deletion given up at the bound would hold it for the whole bound.
func releaseUntil(start time.Time, bound time.Duration) time.Time {
	return start.Add(bound + gcAfter)
}
