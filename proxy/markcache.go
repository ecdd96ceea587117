package proxy

import (
	"hash/maphash"
	"sync"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// markCache is the greatest mark this replica has seen per resource, the
// floor its admissions carry (fencestore.Admission.Floor), with the store
// generation it was seen at (Admission.FloorGeneration). A store that lost
// a mark (one key deleted, a crash of one slot) then still refuses the
// tokens this replica saw superseded, against the remembered mark, and
// writes it back in the same step: the mark heals. It only helps for marks
// this replica saw itself, and only while it runs.
//
// An operator's change of marks (marks reset, raise) is the one thing that
// may move a mark back: the store then sets aside a floor seen before it
// (Decision.FloorVoid), and the cache takes the store's mark in its place
// (replace), so that a reset to 100 admits token 101 on every replica.
//
// Bounded: each of its shards keeps its share of FENCE_MARK_CACHE
// resources, with room for the unevenness of hashing (a quarter more and
// a few), and forgets the resource least recently admitted to make room.
// Only admissions add resources: a refusal raises a remembered mark but
// never adds one, so names invented by a client that are refused never
// evict a floor, and a resource admitted often stays. Sharded, so that
// admissions of different resources rarely meet on a lock.
//
// Pointer-free but for the names: a shard's entries are one slice, linked
// in recency order by index, and found by the full 64-bit hash of their
// name in a map of integers, so a collection marks one slice per shard and
// each name, not a list element, an entry and a boxed value per resource.
// Two names with the same hash share a slot: the name is compared on every
// lookup, and the later admission takes the slot (a forgotten floor, never
// a wrong one).
type markCache struct {
	seed     maphash.Seed
	perShard int
	shards   [markShards]markShard
}

const markShards = 64

type markShard struct {
	mu sync.Mutex
	// index is each entry's slot in slots, by the hash of its resource.
	index map[uint64]int32
	// slots hold the entries, linked from the most recently admitted
	// (head) to the least (tail); at most perShard.
	slots      []markSlot
	head, tail int32 // noSlot when empty
}

type markSlot struct {
	resource   string
	hash       uint64
	mark       fencestore.Mark
	gen        uint64
	prev, next int32 // toward head and toward tail; noSlot at the ends
}

const noSlot = -1

// newMarkCache returns a cache of about size resources, or nil (no cache)
// when size is not above zero.
func newMarkCache(size int) *markCache {
	if size <= 0 {
		return nil
	}
	share := (size + markShards - 1) / markShards
	c := &markCache{seed: maphash.MakeSeed(), perShard: share + share/4 + 8}
	for i := range c.shards {
		c.shards[i].index = make(map[uint64]int32)
		c.shards[i].head, c.shards[i].tail = noSlot, noSlot
	}
	return c
}

// shard returns resource's shard and hash.
func (c *markCache) shard(resource string) (*markShard, uint64) {
	h := maphash.String(c.seed, resource)
	return &c.shards[h%markShards], h
}

// get returns the mark remembered for resource and the generation it was
// seen at.
func (c *markCache) get(resource string) (fencestore.Mark, uint64, bool) {
	s, h := c.shard(resource)
	return s.get(resource, h)
}

func (s *markShard) get(resource string, h uint64) (fencestore.Mark, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[h]; ok && s.slots[i].resource == resource {
		e := &s.slots[i]
		return e.mark, e.gen, true
	}
	return fencestore.Mark{}, 0, false
}

// admitted remembers m, seen at generation gen, for a resource just
// admitted, when it is above what is remembered (or replaces it, when
// replace: the store set the floor aside for an operator's change, unless
// the remembered mark was seen at a later generation), and
// makes the resource the most recent.
func (c *markCache) admitted(resource string, m fencestore.Mark, gen uint64, replace bool) {
	c.put(resource, m, gen, replace, true)
}

// refused raises the mark remembered for resource to m, a mark that
// refused a request, when it is remembered and below m (or replaces it,
// when replace); a resource not remembered is not added.
func (c *markCache) refused(resource string, m fencestore.Mark, gen uint64, replace bool) {
	c.put(resource, m, gen, replace, false)
}

func (c *markCache) put(resource string, m fencestore.Mark, gen uint64, replace, add bool) {
	s, h := c.shard(resource)
	s.put(resource, h, c.perShard, m, gen, replace, add)
}

// put is markCache.put in s, for resource of hash h.
func (s *markShard) put(resource string, h uint64, perShard int, m fencestore.Mark, gen uint64, replace, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[h]
	if ok && s.slots[i].resource == resource {
		e := &s.slots[i]
		// The generation says when the mark was true, and moves only with
		// it: a late write from before an operator's change (an admission
		// answered before a reset, remembered after the reset's own
		// answer) must keep its old generation, so that the store sets it
		// aside; given the newer one it would raise the reset back. For
		// the same reason an operator's change seen at an older generation
		// than the remembered mark's does not replace it.
		switch {
		case replace && gen >= e.gen, e.mark.Before(m):
			e.mark, e.gen = m, gen
		case m == e.mark:
			e.gen = max(e.gen, gen)
		}
		if add {
			s.unlink(i)
			s.pushFront(i)
		}
		return
	}
	if !add {
		return
	}
	switch {
	case ok: // another name with the same hash: the admission takes its slot
		s.unlink(i)
	case len(s.slots) < perShard:
		i = int32(len(s.slots))
		s.slots = append(s.slots, markSlot{})
	default: // full: forget the least recently admitted
		i = s.tail
		s.unlink(i)
		delete(s.index, s.slots[i].hash)
	}
	s.slots[i] = markSlot{resource: resource, hash: h, mark: m, gen: gen}
	s.index[h] = i
	s.pushFront(i)
}

// unlink takes slot i out of the recency order.
func (s *markShard) unlink(i int32) {
	e := &s.slots[i]
	if e.prev == noSlot {
		s.head = e.next
	} else {
		s.slots[e.prev].next = e.next
	}
	if e.next == noSlot {
		s.tail = e.prev
	} else {
		s.slots[e.next].prev = e.prev
	}
	e.prev, e.next = noSlot, noSlot
}

// pushFront makes slot i, unlinked, the most recent.
func (s *markShard) pushFront(i int32) {
	e := &s.slots[i]
	e.prev, e.next = noSlot, s.head
	if s.head != noSlot {
		s.slots[s.head].prev = i
	}
	s.head = i
	if s.tail == noSlot {
		s.tail = i
	}
}
