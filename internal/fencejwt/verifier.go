package fencejwt

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Verifier verifies tokens against the current KeySet, and remembers the
// tokens it verified, so that a holder sending many requests with one
// token costs one signature check per token per process, not one per
// request.
//
// The cache is keyed by the exact header value, bounded (DefaultCacheSize
// tokens, in shards; a full shard first drops the entries that expired,
// then half of the rest), and an entry serves only until the token's exp
// (plus the leeway) and only under the KeySet it was verified with: a new
// key set (a key removed) re-verifies every token. Refusals are not
// cached: they would let anyone fill the cache.
type Verifier struct {
	keys   atomic.Pointer[KeySet]
	leeway time.Duration
	now    func() time.Time
	seed   maphash.Seed
	shards []cacheShard
	perCap int
}

// DefaultCacheSize is how many verified tokens a Verifier remembers when
// NewVerifier is given a size of zero.
const DefaultCacheSize = 65536

const cacheShards = 16

type cacheShard struct {
	mu      sync.Mutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	claims Claims
	keys   *KeySet
	until  time.Time // exp + leeway
}

// NewVerifier returns a Verifier of keys with leeway for exp and nbf,
// remembering up to size tokens (0: DefaultCacheSize; negative: none).
func NewVerifier(keys *KeySet, leeway time.Duration, size int) *Verifier {
	if size == 0 {
		size = DefaultCacheSize
	}
	v := &Verifier{leeway: leeway, now: time.Now, seed: maphash.MakeSeed()}
	v.keys.Store(keys)
	if size > 0 {
		v.perCap = max(1, size/cacheShards)
		v.shards = make([]cacheShard, cacheShards)
		for i := range v.shards {
			v.shards[i].entries = make(map[string]cacheEntry)
		}
	}
	return v
}

// SetKeys replaces the key set; tokens verified under the old one are
// verified again on their next use.
func (v *Verifier) SetKeys(keys *KeySet) { v.keys.Store(keys) }

// Keys is the current key set.
func (v *Verifier) Keys() *KeySet { return v.keys.Load() }

// Verify returns token's claims, from the cache when it was verified under
// the current keys and has not expired, else by Verify.
func (v *Verifier) Verify(token string) (Claims, error) {
	keys := v.keys.Load()
	now := v.now()
	if v.shards == nil {
		return Verify(token, keys, now, v.leeway)
	}
	sh := &v.shards[maphash.String(v.seed, token)%cacheShards]
	sh.mu.Lock()
	e, ok := sh.entries[token]
	sh.mu.Unlock()
	if ok && e.keys == keys && now.Before(e.until) {
		return e.claims, nil
	}
	c, err := Verify(token, keys, now, v.leeway)
	if err != nil {
		return Claims{}, err
	}
	sh.mu.Lock()
	if len(sh.entries) >= v.perCap {
		sh.prune(now, v.perCap)
	}
	sh.entries[token] = cacheEntry{claims: c, keys: keys, until: c.Expiry.Add(v.leeway)}
	sh.mu.Unlock()
	return c, nil
}

// prune drops the expired entries, then, if the shard is still at its
// capacity, half of the rest (map order: arbitrary ones).
func (s *cacheShard) prune(now time.Time, capacity int) {
	for k, e := range s.entries {
		if !now.Before(e.until) {
			delete(s.entries, k)
		}
	}
	for k := range s.entries {
		if len(s.entries) < capacity/2+1 {
			break
		}
		delete(s.entries, k)
	}
}
