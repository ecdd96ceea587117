package etcdstore

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"
)

// The batcher's releases (batch.go carries them): queued by key with the
// time at which they are given up (releaseUntil), sent again after a
// backoff when their transaction failed, and sent once more when the
// store closes. At most maxQueuedReleases wait: past it the release queued
// first is dropped to make room, counted and logged.

// release queues the deletion of an in-flight key, to be tried until moot.
func (b *batcher) release(key string, moot time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.queueRel(key, moot)
	b.signal()
}

// retry queues again the releases of a transaction that failed, but those
// given up already, and holds the releases back for a backoff.
func (b *batcher) retry(rels []rel) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	now := time.Now()
	for _, r := range rels {
		if now.Before(r.moot) {
			b.queueRel(r.key, r.moot)
		}
	}
	b.backoff = min(max(2*b.backoff, minReleaseBackoff), maxReleaseBackoff)
	b.relsAfter = now.Add(b.backoff)
	b.signal()
}

// queueRel puts key in rels until moot; a key queued already keeps its
// place and the later moot. A full queue first drops the release queued
// the longest ago: the likeliest to have been abandoned by its waiters
// already. b.mu is held.
func (b *batcher) queueRel(key string, moot time.Time) {
	if m, ok := b.rels[key]; ok {
		if moot.After(m) {
			b.rels[key] = moot
		}
		return
	}
	if len(b.rels) >= max(b.maxRels(), 1) {
		if old, ok := b.relq.Oldest(); ok {
			delete(b.rels, old)
			b.droppedTotal++
			if b.dropped++; b.dropped == 1 {
				b.log.Warn("too many releases queued: dropping the oldest, whose records hold later requests until their waiters abandon them",
					zap.Int("queued", len(b.rels)), zap.Uint64("dropped", b.droppedTotal))
			}
		}
	}
	b.rels[key] = moot
	b.relq.Push(key)
}

// unqueueRel takes key out of rels (a batch took it, or it is moot), and
// out of their order. b.mu is held.
func (b *batcher) unqueueRel(key string) {
	delete(b.rels, key)
	b.relq.Remove(key)
}

// maxRels is maxQueuedReleases, or the tests' smaller bound.
func (b *batcher) maxRels() int {
	if b.relMax > 0 {
		return b.relMax
	}
	return maxQueuedReleases
}

// acked notes that a transaction with releases succeeded: the next
// failure starts the backoff anew.
func (b *batcher) acked() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backoff = 0
}

// flush sends, once, the releases still queued when the store closed: a
// replica that shuts down releases what it owes rather than leave its
// records to each waiter's bound. One that fails stays so.
func (b *batcher) flush() {
	b.mu.Lock()
	rels := b.final
	b.final = nil
	b.mu.Unlock()
	if len(rels) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	for chunk := range slices.Chunk(rels, b.maxOps) {
		b.commit(ctx, batch{rels: chunk})
	}
}

// DroppedReleases is how many releases this store dropped unsent because
// too many were queued at once (a long outage under load).
func (s *Store) DroppedReleases() uint64 {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.droppedTotal
}
