package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The drain barrier in etcd (doc.go has the layout). The admission
// transaction puts the admitted request's in-flight key, attached to a
// lease whose TTL covers the request's flight, and counts the keys of its
// resource ordered before it. Drain watches that range until it is
// empty; Release deletes the key in the background (with the next batch,
// batch.go); a replica that never releases (dead, frozen, cut off) holds
// the others back until etcd expires the lease, on etcd's clock.

const (
	// leaseSlack is added to a flight's whole seconds to make its lease's
	// TTL, so that one lease serves a replica's admissions for about this
	// long. It is also, with the rounding up to whole seconds, the most
	// by which a record can outlive its flight (see doc.go).
	leaseSlack = time.Second
	// renewAfter is the age at which a lease in use has its successor
	// granted in the background, so that steady admissions never wait for
	// a grant.
	renewAfter = leaseSlack / 2
	// grantTimeout bounds a lease grant (admissions waiting for it are
	// bounded by their own contexts).
	grantTimeout = 5 * time.Second
	// regrantAfter is how long a grant may run before an admission that
	// needs a lease starts another beside it: a grant sent into an
	// election can wait for the server's own timeout, long after a new
	// leader would answer a new one.
	regrantAfter = 250 * time.Millisecond
	// releaseTimeout bounds a release: nobody waits for it, and a lost one
	// only keeps its record until its lease expires.
	releaseTimeout = 2 * time.Second
	// lookupTimeout bounds the lease look-up that tells an expiry from a
	// release (expired), which only a metric depends on.
	lookupTimeout = time.Second
	// maxLeaseTTL is etcd's largest lease TTL (seconds).
	maxLeaseTTL = 9_000_000_000
	// grantAttempts bounds the grants one admission may wait for: a grant
	// that takes longer than the slack yields a lease that cannot cover
	// the flight, and a cluster that slow fails the admission.
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
// admission whose flight it covers, so a replica grants about two leases a
// second per distinct flight length while it admits (one every renewAfter),
// and none while idle.
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
// up, plus the slack.
func ttlFor(flight time.Duration) int64 {
	sec := int64(flight / time.Second)
	if flight%time.Second != 0 {
		sec++
	}
	return min(sec+int64(leaseSlack/time.Second), maxLeaseTTL)
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
	return nil, fencestore.Unavailable(fmt.Errorf("etcdstore: lease grants take longer than %v, so no lease covers a flight of %v", leaseSlack, flight))
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

// Release queues f's in-flight key for deletion and returns: nobody waits
// for it. The deletion rides the next batch (batch.go), so that under load
// a release costs a fraction of an etcd write. A release that fails, or
// that is still queued when the store closes, leaves its key until its
// lease expires.
func (s *Store) Release(f fencestore.Flight) {
	if !f.Registered() || !s.ours(f) {
		return
	}
	s.batch.release(f.Key)
}

// Drain waits until no in-flight key of f's resource is ordered before
// f's. It opens a watch on that range "from now" and waits until etcd has
// created it, then reads the range: a key deleted before the watch began
// is missing from the read, one deleted after is an event, so nothing is
// missed. (A watch from the admission's revision would be as exact, but
// etcd serves a watch that starts in the past from its "unsynced" group,
// which it catches up every 100ms: a release soon after the Drain began
// would wake it up to 100ms late, as measured.) Each deletion in the range,
// each DrainPoll, and a broken watch (a lost leader, a closed client)
// bring another read, until one finds the range empty.
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
	from, end, _ := olderRange(f.Key)
	exp := &expiries{s: s, seen: make(map[clientv3.LeaseID]bool)}
	defer exp.stop()
	tick := time.NewTicker(s.drainPoll)
	defer tick.Stop()

	var wch clientv3.WatchChan // nil while there is no watch
	stopWatch := func() {}
	defer func() { stopWatch() }()
	// watch opens the watch and waits for etcd to have created it; on
	// failure wch stays nil, and the next tick tries again.
	watch := func() error {
		var wctx context.Context
		// WithRequireLeader: a member cut off from its cluster ends the
		// watch rather than leave it silent.
		wctx, stopWatch = context.WithCancel(clientv3.WithRequireLeader(ctx))
		ch := s.client.Watch(wctx, from, clientv3.WithRange(end), clientv3.WithCreatedNotify(),
			clientv3.WithPrevKV(), clientv3.WithFilterPut())
		select {
		case wr, ok := <-ch:
			if ok && wr.Created && !wr.Canceled && wr.Err() == nil {
				wch = ch
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errClosed
		}
		stopWatch()
		return nil
	}
	for {
		if wch == nil {
			if err := watch(); err != nil {
				return exp.any(), err
			}
		}
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithCountOnly())
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return exp.any(), cerr
			}
			return exp.any(), s.fail(ctx, "drain", err)
		}
		if resp.Count == 0 {
			return exp.wait(), nil
		}
		// Wait for a deletion in the range, a tick, or a broken watch.
	wait:
		for {
			select {
			case wr, ok := <-wch:
				if !ok || wr.Canceled || wr.Err() != nil {
					stopWatch()
					wch = nil
					break wait
				}
				deleted := false
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						deleted = true
						if ev.PrevKv != nil && ev.PrevKv.Lease != 0 {
							exp.look(clientv3.LeaseID(ev.PrevKv.Lease))
						}
					}
				}
				if deleted {
					break wait
				}
			case <-tick.C:
				break wait
			case <-ctx.Done():
				return exp.any(), ctx.Err()
			case <-s.done:
				return exp.any(), errClosed
			}
		}
		if wch == nil {
			// The watch broke: read now, and watch again at the next tick
			// (a watch that cannot be made must not spin).
			resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithCountOnly())
			if err == nil && resp.Count == 0 {
				return exp.wait(), nil
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return exp.any(), ctx.Err()
			case <-s.done:
				return exp.any(), errClosed
			}
		}
	}
}

// expiries tells whether an older record that a Drain saw deleted went by
// its lease's expiry rather than by a release: a deletion looks the same
// in a watch either way, so the record's lease is looked up, and one that
// etcd no longer has counts as expired. It is an approximation (doc.go).
type expiries struct {
	s      *Store
	ctx    context.Context
	cancel context.CancelFunc
	seen   map[clientv3.LeaseID]bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	found  bool
}

func (e *expiries) look(id clientv3.LeaseID) {
	if e.seen[id] {
		return
	}
	if len(e.seen) == 0 {
		e.ctx, e.cancel = context.WithTimeout(context.Background(), lookupTimeout)
	}
	e.seen[id] = true
	e.wg.Go(func() {
		resp, err := e.s.client.TimeToLive(e.ctx, id)
		if (err == nil && resp.TTL < 0) || isLeaseNotFound(err) {
			e.mu.Lock()
			e.found = true
			e.mu.Unlock()
		}
	})
}

// wait waits for the look-ups and reports whether one found an expiry.
func (e *expiries) wait() bool {
	e.wg.Wait()
	return e.any()
}

// any reports whether a look-up done so far found an expiry.
func (e *expiries) any() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.found
}

// stop cuts the look-ups short and waits for them.
func (e *expiries) stop() {
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
}
