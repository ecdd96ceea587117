package proxy

import (
	"hash/maphash"
	"sync"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// markCache is the greatest mark this replica has seen per resource, the
// floor its admissions carry (fencestore.Admission.Floor). A store that lost
// a mark (a crash without fsync, a failover to a replica that lagged) then
// still refuses the tokens this replica saw superseded, against the
// remembered mark, and writes it back in the same step: the mark heals. It
// only helps for marks this replica saw itself, and only while it runs.
//
// Bounded (FENCE_MARK_CACHE resources): a full shard forgets one entry, an
// arbitrary one, to make room. Sharded, so that admissions of different
// resources rarely meet on a lock.
type markCache struct {
	seed     maphash.Seed
	perShard int
	shards   [markShards]markShard
}

const markShards = 64

type markShard struct {
	mu sync.Mutex
	m  map[string]fencestore.Mark
}

// newMarkCache returns a cache of about size resources, or nil (no cache)
// when size is not above zero.
func newMarkCache(size int) *markCache {
	if size <= 0 {
		return nil
	}
	c := &markCache{seed: maphash.MakeSeed(), perShard: max(1, size/markShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]fencestore.Mark)
	}
	return c
}

func (c *markCache) shard(resource string) *markShard {
	return &c.shards[maphash.String(c.seed, resource)%markShards]
}

// get returns the mark remembered for resource.
func (c *markCache) get(resource string) (fencestore.Mark, bool) {
	s := c.shard(resource)
	s.mu.Lock()
	m, ok := s.m[resource]
	s.mu.Unlock()
	return m, ok
}

// see remembers m for resource when it is above what is remembered.
func (c *markCache) see(resource string, m fencestore.Mark) {
	s := c.shard(resource)
	s.mu.Lock()
	old, ok := s.m[resource]
	switch {
	case ok && !old.Before(m):
	case ok:
		s.m[resource] = m
	default:
		if len(s.m) >= c.perShard {
			for k := range s.m { // Go's map order: an arbitrary victim
				delete(s.m, k)
				break
			}
		}
		s.m[resource] = m
	}
	s.mu.Unlock()
}
