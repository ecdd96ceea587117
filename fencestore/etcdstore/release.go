package etcdstore

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"
)

// The batcher's releases (batch.go carries them): queued by key with the
// time at which trying is moot, sent again after a backoff when their
// transaction failed, and sent once more when the store closes.

// release queues the deletion of an in-flight key, to be tried until moot.
func (b *batcher) release(key string, moot time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if len(b.rels) >= maxQueuedReleases {
		if b.dropped++; b.dropped == 1 {
			b.log.Warn("too many releases queued: dropping some, whose records hold later requests until their waiters abandon them",
				zap.Int("queued", len(b.rels)))
		}
		return
	}
	if m, ok := b.rels[key]; !ok || moot.After(m) {
		b.rels[key] = moot
	}
	b.signal()
}

// retry queues again the releases of a transaction that failed, but those
// already moot, and holds the releases back for a backoff.
func (b *batcher) retry(rels []rel) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	now := time.Now()
	for _, r := range rels {
		if now.Before(r.moot) && len(b.rels) < maxQueuedReleases {
			if m, ok := b.rels[r.key]; !ok || r.moot.After(m) {
				b.rels[r.key] = r.moot
			}
		}
	}
	b.backoff = min(max(2*b.backoff, minReleaseBackoff), maxReleaseBackoff)
	b.relsAfter = now.Add(b.backoff)
	b.signal()
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
