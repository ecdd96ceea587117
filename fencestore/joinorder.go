package fencestore

// JoinOrder is the order in which keys joined a bounded set, to find the
// one that joined first when the set is full: a store's owed releases,
// which a long outage keeps at their bound, so that every new release has
// to make room. Push, Remove and Oldest cost O(1) amortised; a scan of the
// set for its oldest member cost the whole set per release instead, under
// the set's lock.
//
// A key removed (Remove, Oldest), or pushed while it is there already,
// leaves its place in the order untouched: a removed key's place is stale,
// skipped when Oldest meets it and swept away once the stale places
// outnumber the live ones, so the order never holds more than twice the
// live keys and 64 places. A key pushed again after its removal joins last. The zero
// value is empty and ready; a JoinOrder is not safe for concurrent use
// (its set's lock guards it).
type JoinOrder[K comparable] struct {
	order []joined[K]
	seq   map[K]uint64 // each live key's place
	next  uint64
}

// joined is one place in the order: a key and the rank it joined with.
type joined[K comparable] struct {
	key K
	seq uint64
}

// Push records k as joined last, and reports true; a key there already
// keeps its place, and Push reports false.
func (q *JoinOrder[K]) Push(k K) bool {
	if _, ok := q.seq[k]; ok {
		return false
	}
	if q.seq == nil {
		q.seq = make(map[K]uint64)
	}
	q.next++
	q.seq[k] = q.next
	q.order = append(q.order, joined[K]{key: k, seq: q.next})
	q.trim()
	return true
}

// Remove forgets k (a key not there is ignored): it left the set.
func (q *JoinOrder[K]) Remove(k K) {
	delete(q.seq, k)
	q.trim()
}

// Contains reports whether k is there.
func (q *JoinOrder[K]) Contains(k K) bool {
	_, ok := q.seq[k]
	return ok
}

// Len is the number of keys there.
func (q *JoinOrder[K]) Len() int { return len(q.seq) }

// Oldest removes and returns the key that joined first of those there;
// false when there is none.
func (q *JoinOrder[K]) Oldest() (K, bool) {
	for len(q.order) > 0 {
		at := q.order[0]
		clear(q.order[:1]) // let the key's memory go
		q.order = q.order[1:]
		if q.live(at) {
			delete(q.seq, at.key)
			q.trim()
			return at.key, true
		}
	}
	q.order = nil // the array's dead front goes with it
	var none K
	return none, false
}

// Reset empties q.
func (q *JoinOrder[K]) Reset() {
	clear(q.seq)
	q.order = nil
}

// live reports whether at is the place of a key still there, not removed
// and pushed again since.
func (q *JoinOrder[K]) live(at joined[K]) bool {
	seq, ok := q.seq[at.key]
	return ok && seq == at.seq
}

// trim sweeps the stale places once they outnumber the live ones (and a
// few more): a sweep costs the places it walks, at least half of them
// stale, each left by one call since the last sweep.
func (q *JoinOrder[K]) trim() {
	if len(q.order) > 2*len(q.seq)+64 {
		q.sweep()
	}
}

// sweep drops the stale places, keeping the live ones in their order.
func (q *JoinOrder[K]) sweep() {
	live := q.order[:0]
	for _, at := range q.order {
		if q.live(at) {
			live = append(live, at)
		}
	}
	clear(q.order[len(live):])
	q.order = live
}
