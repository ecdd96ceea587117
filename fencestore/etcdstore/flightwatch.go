package etcdstore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The waiters of one resource in one process share one etcd watch of the
// resource's in-flight records (its flight range), opened by the first
// waiter and closed with the last. The watch reports deletions only; each
// is handed to the waiters whose snapshot holds the deleted key, through a
// channel of each waiter's own, so a release wakes only the waiters it may
// unblock, and a waiter costs no read per unrelated deletion.
//
// Nothing is missed. The watch begins "from now" (etcd serves a watch that
// begins in the past from its unsynced group, caught up every 100ms, which
// delayed wake-ups by up to 100ms, as measured), at revision startRev, and
// remembers the keys it saw deleted since then. A waiter admitted at a
// revision at or after startRev finds every deletion after its admission
// either among those (at registration) or in a later event; one admitted
// before reads what remains of its snapshot after registering (check), so
// a deletion is either before that read or in an event after it. Each
// time the watch is made again (a lost leader: the watch requires one; a
// broken stream), and every Options.DrainPoll while it has waiters, the
// watcher reads the keys its waiters still wait for (one read for them
// all), a net under lost events.

// maxDeleted bounds the deletions a watcher remembers; past it, it forgets
// them and moves startRev on, and the waiters admitted before the new
// startRev read their snapshot once instead.
const maxDeleted = 4096

// checkChunk is how many keys one read of check asks about, well within
// etcd's default --max-txn-ops (128).
const checkChunk = 64

// waiter is one Drain's side of a watcher: the keys it still waits for
// (guarded by the watcher's mu), and a channel that a deletion of one of
// them signals.
type waiter struct {
	remaining map[string]time.Duration // key: its bound
	// abandonAt is when each key is abandoned: its bound plus
	// AbandonMargin after this process first saw it (fencestore.Watched).
	abandonAt map[string]time.Time
	wake      chan struct{} // buffered 1
}

type watcher struct {
	s      *Store
	rng    string
	refs   int // guarded by s.flights.mu
	cancel context.CancelFunc

	mu sync.Mutex
	// started is set once the watch was first created; every deletion
	// after startRev has been delivered (those since in deleted) or will
	// be.
	started  bool
	startRev int64
	lastRev  int64
	deleted  map[string]struct{}
	byKey    map[string]map[*waiter]struct{}
}

// join returns the watcher of rng, starting it for the first waiter.
func (s *Store) join(rng string) (*watcher, error) {
	s.flights.mu.Lock()
	defer s.flights.mu.Unlock()
	if w := s.flights.watchers[rng]; w != nil {
		w.refs++
		return w, nil
	}
	ctx, cancel := context.WithCancel(s.bgCtx)
	w := &watcher{s: s, rng: rng, refs: 1, cancel: cancel,
		deleted: make(map[string]struct{}), byKey: make(map[string]map[*waiter]struct{})}
	if !s.goBackground(func() { w.run(ctx) }) {
		cancel()
		return nil, errClosed
	}
	if s.flights.watchers == nil {
		s.flights.watchers = make(map[string]*watcher)
	}
	s.flights.watchers[rng] = w
	return w, nil
}

// leave ends a waiter's use of w, and stops w with its last waiter.
func (s *Store) leave(w *watcher) {
	s.flights.mu.Lock()
	defer s.flights.mu.Unlock()
	if w.refs--; w.refs == 0 {
		w.cancel()
		delete(s.flights.watchers, w.rng)
	}
}

// register adds wt, whose snapshot was read at rev, and drops from it the
// keys already seen deleted. It reports whether wt must read its snapshot
// (check): the watch began after rev, so a deletion may be in no event.
// Before the watch is first created, it need not: the creation reads the
// keys of every waiter registered by then.
func (w *watcher) register(wt *waiter, rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range wt.remaining {
		if _, gone := w.deleted[key]; gone {
			delete(wt.remaining, key)
			continue
		}
		set := w.byKey[key]
		if set == nil {
			set = make(map[*waiter]struct{})
			w.byKey[key] = set
		}
		set[wt] = struct{}{}
	}
	return w.started && rev < w.startRev && len(wt.remaining) > 0
}

func (w *watcher) unregister(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range wt.remaining {
		w.unlink(key, wt)
	}
}

// unlink removes wt from key's waiters. w.mu is held.
func (w *watcher) unlink(key string, wt *waiter) {
	if set := w.byKey[key]; set != nil {
		delete(set, wt)
		if len(set) == 0 {
			delete(w.byKey, key)
		}
	}
}

// keys returns what wt still waits for.
func (w *watcher) keys(wt *waiter) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(wt.remaining))
}

// pending returns how many keys wt still waits for, and when the first of
// them is abandoned (abandonAt).
func (w *watcher) pending(wt *waiter) (int, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Time
	for key := range wt.remaining {
		if at := wt.abandonAt[key]; next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return len(wt.remaining), next
}

// due removes from wt, and returns with their bounds, the keys whose
// abandonment has come (abandonAt).
func (w *watcher) due(wt *waiter) map[string]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]time.Duration)
	now := time.Now()
	for key, bound := range wt.remaining {
		if !now.Before(wt.abandonAt[key]) {
			out[key] = bound
			delete(wt.remaining, key)
			w.unlink(key, wt)
		}
	}
	return out
}

// gone records key's deletion (at rev, 0 when a read found it absent) and
// wakes the waiters that wait for it.
func (w *watcher) gone(key string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.goneLocked(key, rev)
}

func (w *watcher) goneLocked(key string, rev int64) {
	if rev > 0 {
		if len(w.deleted) >= maxDeleted {
			clear(w.deleted)
			w.startRev = w.lastRev
		}
		w.deleted[key] = struct{}{}
		w.lastRev = max(w.lastRev, rev)
	}
	w.s.watched.Forget(key)
	for wt := range w.byKey[key] {
		delete(wt.remaining, key)
		select {
		case wt.wake <- struct{}{}:
		default:
		}
	}
	delete(w.byKey, key)
}

// created records that the watch (re)began after rev.
func (w *watcher) created(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	w.startRev, w.lastRev = rev, rev
	clear(w.deleted)
}

// waited returns every key that a waiter of w still waits for.
func (w *watcher) waited() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.byKey))
}

// check reads which of keys are still in etcd, and hands the absent ones
// to gone: a linearizable read, after which every deletion is in an event.
func (w *watcher) check(ctx context.Context, keys []string) error {
	for chunk := range slices.Chunk(keys, checkChunk) {
		ops := make([]clientv3.Op, len(chunk))
		for i, key := range chunk {
			ops[i] = clientv3.OpGet(key, clientv3.WithCountOnly())
		}
		resp, err := w.s.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		if len(resp.Responses) != len(chunk) {
			return errShape
		}
		for i, r := range resp.Responses {
			if r.GetResponseRange().GetCount() == 0 {
				w.gone(chunk[i], 0)
			}
		}
	}
	return nil
}

// run keeps w's watch open until ctx ends (its last waiter left, or the
// store closed): on each deletion it wakes the waiters of the key; at each
// creation and each DrainPoll it reads the keys still waited for. A watch
// that breaks is made again at the next tick, polled meanwhile.
func (w *watcher) run(ctx context.Context) {
	tick := time.NewTicker(w.s.drainPoll)
	defer tick.Stop()
	for ctx.Err() == nil {
		w.follow(ctx, tick.C)
		select {
		case <-tick.C:
			_ = w.check(ctx, w.waited())
		case <-ctx.Done():
		}
	}
}

// follow opens the watch and handles its responses until it breaks or ctx
// ends. A read that fails is left to the next tick.
func (w *watcher) follow(ctx context.Context, tick <-chan time.Time) {
	// WithRequireLeader: a member cut off from its cluster ends the watch
	// rather than leave it silent.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := w.s.client.Watch(wctx, w.rng, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return
			}
			if wr.Created {
				w.created(wr.Header.Revision)
				_ = w.check(ctx, w.waited())
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					w.gone(string(ev.Kv.Key), ev.Kv.ModRevision)
				}
			}
		case <-tick:
			_ = w.check(ctx, w.waited())
		case <-ctx.Done():
			return
		}
	}
}
