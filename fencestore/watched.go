package fencestore

import (
	"sync"
	"time"
)

// Watched is one process's watch of the older in-flight entries its
// waiters wait for: when this process first saw each (the earliest reply
// among the admissions whose snapshot listed it and that waited for it:
// a sighting is recorded when a waiter begins to watch), on its monotonic
// clock. Every waiter of the process times an entry from that first
// sighting, not from its own admission: a second waiter continues the
// observation the first began, so a slow admission (a failover, a store
// that answers late) never restarts it, and a resource is held at most the
// entry's bound plus AbandonMargin after this process first saw it in
// flight, not that again per waiter.
//
// That is sound because an entry listed in a snapshot was in flight when
// that admission was decided: its owner's own admission, and so the start
// of its bound, came before the reply that first showed it here. The
// Redis and etcd stores keep one Watched each for all their waiters, keyed
// by what names an entry uniquely in them (a key and member, a record
// key); the memory and bolt stores, whose entries live in the process,
// keep the first sighting on the entry itself. The zero value is ready.
type Watched[K comparable] struct {
	mu    sync.Mutex
	m     map[K]watchedEntry
	swept time.Time
}

type watchedEntry struct {
	since time.Time     // first seen here
	bound time.Duration // the longest bound a snapshot gave it
}

// watchedKeep is how long after its abandonment an entry stays in the
// table, unless forgotten sooner: a waiter that meets it in that time (its
// removal failed: the store was down) gives it up at once too, rather than
// watch it again from its own admission.
const watchedKeep = 10 * time.Minute

// watchedSweep is how often at most the table drops what it keeps no
// longer.
const watchedSweep = time.Second

// AbandonAt records that a waiter whose admission's reply came at seen
// waits for the entry id (unique in its store) with bound, and returns when
// this process abandons the entry: bound plus AbandonMargin after the
// first sighting of it here. seen must carry a monotonic reading (a
// time.Now of this process, never stripped).
func (w *Watched[K]) AbandonAt(id K, seen time.Time, bound time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[K]watchedEntry)
	}
	e, ok := w.m[id]
	if !ok || seen.Before(e.since) {
		e.since = seen
	}
	e.bound = max(e.bound, bound)
	w.m[id] = e
	w.sweep(time.Now())
	return e.since.Add(e.bound + AbandonMargin)
}

// Forget drops id: its entry is gone (released, or found absent).
func (w *Watched[K]) Forget(id K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

// size is how many entries the table holds (tests).
func (w *Watched[K]) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// sweep drops the entries abandoned longer than watchedKeep ago, at most
// once per watchedSweep. w.mu is held.
func (w *Watched[K]) sweep(now time.Time) {
	if now.Sub(w.swept) < watchedSweep {
		return
	}
	w.swept = now
	for id, e := range w.m {
		if now.Sub(e.since) > e.bound+AbandonMargin+watchedKeep {
			delete(w.m, id)
		}
	}
}
