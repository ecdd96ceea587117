package proxy

import (
	"container/list"
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
type markCache struct {
	seed     maphash.Seed
	perShard int
	shards   [markShards]markShard
}

const markShards = 64

type markShard struct {
	mu sync.Mutex
	m  map[string]*list.Element // of *markEntry
	// lru orders the entries by their last admission, the most recent
	// first.
	lru list.List
}

type markEntry struct {
	resource string
	mark     fencestore.Mark
	gen      uint64
}

// newMarkCache returns a cache of about size resources, or nil (no cache)
// when size is not above zero.
func newMarkCache(size int) *markCache {
	if size <= 0 {
		return nil
	}
	share := (size + markShards - 1) / markShards
	c := &markCache{seed: maphash.MakeSeed(), perShard: share + share/4 + 8}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*list.Element)
	}
	return c
}

func (c *markCache) shard(resource string) *markShard {
	return &c.shards[maphash.String(c.seed, resource)%markShards]
}

// get returns the mark remembered for resource and the generation it was
// seen at.
func (c *markCache) get(resource string) (fencestore.Mark, uint64, bool) {
	s := c.shard(resource)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[resource]; ok {
		me := e.Value.(*markEntry)
		return me.mark, me.gen, true
	}
	return fencestore.Mark{}, 0, false
}

// admitted remembers m, seen at generation gen, for a resource just
// admitted, when it is above what is remembered (or replaces it, when
// replace: the store set the floor aside for an operator's change), and
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
	s := c.shard(resource)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[resource]; ok {
		me := e.Value.(*markEntry)
		if replace || me.mark.Before(m) {
			me.mark = m
		}
		me.gen = max(me.gen, gen)
		if add {
			s.lru.MoveToFront(e)
		}
		return
	}
	if !add {
		return
	}
	if s.lru.Len() >= c.perShard {
		last := s.lru.Back()
		s.lru.Remove(last)
		delete(s.m, last.Value.(*markEntry).resource)
	}
	s.m[resource] = s.lru.PushFront(&markEntry{resource: resource, mark: m, gen: gen})
}
