package redisstore

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The operator's side (fencestore.Keeper); doc.go has the layout.
//
// The identity record is the key KeyPrefix itself: every resource name is
// non-empty, so no mark key is it, and it is inside the prefix, so an ACL
// pattern ~<prefix>* covers it (with an empty prefix it is the empty key,
// which Redis allows). Once Expect names it, admit.lua reads it in every
// run and refuses the run's admissions when it is not the one expected, on
// a single server and through Sentinel. On a Ring every shard holds a copy
// of it (Init writes them all), and each admission checks the copy on its
// own shard, in its script run. On a Cluster it cannot: the key lives in
// one slot, and a script may touch the keys of one slot only; there the
// record is read by Ping and by a background check every
// Options.IdentityCheck, and admissions fail once a read found it gone or
// changed (clusterLost). That is weaker than the contract's check inside
// every admission: see doc.go.

var _ fencestore.Keeper = (*Store)(nil)

// DefaultIdentityCheck is how often a Cluster store reads its identity
// record once Expect was called, when Options.IdentityCheck is zero.
const DefaultIdentityCheck = time.Second

// errNoResource refuses an empty resource name: its key would be the
// identity record's.
var errNoResource = errors.New("empty resource name (the key prefix alone is the store's identity record)")

// identitySeen is what a Cluster store last read of its identity record:
// its value ("" for none), or the error of a server that answered with
// something else than a string.
type identitySeen struct {
	value string
	err   error
}

// Identity returns the identity record, "" when there is none. On a Ring
// every live shard must hold the same one: shards that disagree (one was
// emptied or replaced) are an error, which only Init with force ends.
func (s *Store) Identity(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fencestore.Unavailable(err)
	}
	if _, ok := s.client.(*redis.Ring); ok {
		return s.ringIdentity(ctx)
	}
	c, err := s.keyClient(ctx, s.prefix)
	if err != nil {
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: identity: %w", err))
	}
	return s.readIdentity(ctx, c)
}

// readIdentity reads the identity key through c, and on a Cluster records
// what it read for clusterLost.
func (s *Store) readIdentity(ctx context.Context, c redis.Cmdable) (string, error) {
	v, err := c.Get(ctx, s.prefix).Result()
	switch {
	case errors.Is(err, redis.Nil):
		v, err = "", nil
	case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
		err = fencestore.Unavailable(fmt.Errorf("redisstore: the identity key %q holds no identity record: %w", s.prefix, err))
		if s.cluster {
			s.seen.Store(&identitySeen{err: err})
		}
		return "", err
	case err != nil:
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: identity %q: %w", s.prefix, err))
	}
	if s.cluster {
		s.seen.Store(&identitySeen{value: v})
	}
	return v, nil
}

// ringIdentity reads the identity record on every live shard of ring.
func (s *Store) ringIdentity(ctx context.Context) (string, error) {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return "", err
	}
	var id string
	var held []string
	for i, n := range nodes {
		v, err := s.readIdentity(ctx, n.c)
		if err != nil {
			return "", fmt.Errorf("shard %s: %w", n.addr, err)
		}
		if i == 0 {
			id = v
		}
		held = append(held, fmt.Sprintf("%s holds %q", n.addr, v))
		if v != id {
			id = "\x00" // they disagree
		}
	}
	if id == "\x00" {
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: the ring's shards hold different identity records (%s): "+
			"a shard was emptied or replaced, and its marks may be gone", strings.Join(held, ", ")))
	}
	return id, nil
}

// Init writes a new identity record: SET NX without force, so that of two
// replicas that start on an empty store at once one wins. On a Ring it
// writes every live shard, the one the identity key maps to first; without
// force, a shard that holds one already fails it with ErrIdentityExists.
func (s *Store) Init(ctx context.Context, force bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fencestore.Unavailable(err)
	}
	id := fencestore.NewIdentity(force)
	set := func(c redis.Cmdable) error {
		if force {
			return c.Set(ctx, s.prefix, id, 0).Err()
		}
		ok, err := c.SetNX(ctx, s.prefix, id, 0).Result()
		if err == nil && !ok {
			return fencestore.ErrIdentityExists
		}
		return err
	}
	if ring, ok := s.client.(*redis.Ring); ok {
		if err := s.ringInit(ctx, ring, force, set); err != nil {
			return "", err
		}
		return id, nil
	}
	c, err := s.keyClient(ctx, s.prefix)
	if err == nil {
		err = set(c)
	}
	if err != nil {
		return "", initError(err)
	}
	if s.cluster {
		s.seen.Store(&identitySeen{value: id})
	}
	return id, nil
}

func (s *Store) ringInit(ctx context.Context, ring *redis.Ring, force bool, set func(redis.Cmdable) error) error {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return err
	}
	if !force {
		for _, n := range nodes {
			v, err := s.readIdentity(ctx, n.c)
			if err != nil {
				return fmt.Errorf("shard %s: %w", n.addr, err)
			}
			if v != "" {
				return fmt.Errorf("shard %s: %w", n.addr, fencestore.ErrIdentityExists)
			}
		}
	}
	// The shard the key maps to goes first: of two Inits at once, one
	// wins there, and the other stops before writing any other shard.
	anchor, err := ring.GetShardClientForKey(s.prefix)
	if err != nil {
		return initError(err)
	}
	if err := set(anchor); err != nil {
		return initError(fmt.Errorf("shard %s: %w", anchor.Options().Addr, err))
	}
	for _, n := range nodes {
		if n.addr == anchor.Options().Addr {
			continue
		}
		if err := set(n.c); err != nil {
			return initError(fmt.Errorf("shard %s: %w", n.addr, err))
		}
	}
	return nil
}

func initError(err error) error {
	if errors.Is(err, fencestore.ErrIdentityExists) || errors.Is(err, fencestore.ErrUnavailable) {
		return err
	}
	return fencestore.Unavailable(fmt.Errorf("redisstore: init: %w", err))
}

// Expect makes every later admission check that the identity record is id
// (id "" turns the check off). On a Cluster it starts the background check
// (the first time), which reads the record at once and then every
// Options.IdentityCheck until Close.
func (s *Store) Expect(id string) {
	s.expect.Store(&id)
	if s.cluster && id != "" {
		s.checkOnce.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.closed {
				return
			}
			s.bg.Add(1)
			go s.checkIdentity()
		})
	}
}

// checkIdentity reads a Cluster store's identity record until Close.
func (s *Store) checkIdentity() {
	defer s.bg.Done()
	t := time.NewTicker(s.identityEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.identityEvery)
		c, err := s.keyClient(ctx, s.prefix)
		if err == nil {
			_, err = s.readIdentity(ctx, c)
		}
		cancel()
		if err != nil {
			// A node that does not answer leaves the last reading.
			s.log.Debug("identity check failed", zap.Error(err))
		}
		select {
		case <-s.done:
			return
		case <-t.C:
		}
	}
}

// clusterLost is the error an admission on a Cluster fails with: a
// *LostError when the identity record last read is not the one expected,
// nil otherwise (and on other clients, whose script checks it).
func (s *Store) clusterLost() error {
	if !s.cluster {
		return nil
	}
	want := s.expect.Load()
	if want == nil || *want == "" {
		return nil
	}
	seen := s.seen.Load()
	switch {
	case seen == nil:
		return nil
	case seen.err != nil:
		return seen.err
	case seen.value != *want:
		return &fencestore.LostError{Want: *want, Found: seen.value}
	}
	return nil
}

// pingIdentity checks the identity record once Expect named one: on every
// live shard of a Ring, else where the key lives (and on a Cluster that
// reading is what admissions go by).
func (s *Store) pingIdentity(ctx context.Context) error {
	want := s.expect.Load()
	if want == nil || *want == "" {
		return nil
	}
	var found []string
	if _, ok := s.client.(*redis.Ring); ok {
		nodes, err := s.nodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			v, err := s.readIdentity(ctx, n.c)
			if err != nil {
				return err
			}
			found = append(found, v)
		}
	} else {
		c, err := s.keyClient(ctx, s.prefix)
		if err != nil {
			return fencestore.Unavailable(fmt.Errorf("redisstore: identity: %w", err))
		}
		v, err := s.readIdentity(ctx, c)
		if err != nil {
			return err
		}
		found = append(found, v)
	}
	for _, v := range found {
		if v != *want {
			return &fencestore.LostError{Want: *want, Found: v}
		}
	}
	return nil
}

// HasMarks reports whether any key under the prefix is something else than
// the identity record or an in-flight key (a sorted set named as one): a
// mark, or what an older version or someone else left there. It SCANs
// every server (every master of a Cluster, every live shard of a Ring) and
// stops at the first; it never runs KEYS.
func (s *Store) HasMarks(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fencestore.Unavailable(err)
	}
	nodes, err := s.nodes(ctx)
	if err != nil {
		return false, err
	}
	match := globEscape(s.prefix) + "*"
	for _, n := range nodes {
		var cursor uint64
		for {
			keys, next, err := n.c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return false, fencestore.Unavailable(fmt.Errorf("redisstore: has marks: SCAN %s: %w", n.addr, err))
			}
			for _, k := range keys {
				if k == s.prefix || !strings.HasPrefix(k, s.prefix) {
					continue
				}
				if isFlightKeyName(k) {
					// GET, not TYPE: the least an ACL must allow.
					err := n.c.Get(ctx, k).Err()
					if errors.Is(err, redis.Nil) || (err != nil && redis.HasErrorPrefix(err, "WRONGTYPE")) {
						continue // gone, or an in-flight key
					}
					if err != nil {
						return false, fencestore.Unavailable(fmt.Errorf("redisstore: has marks: GET %q: %w", k, err))
					}
				}
				return true, nil
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return false, nil
}

// Get returns resource's mark, sequence included. A corrupt mark, or a key
// of another type, is an error wrapping fencestore.ErrUnavailable that
// names the key.
func (s *Store) Get(ctx context.Context, resource string) (fencestore.Mark, bool, error) {
	if err := ctx.Err(); err != nil {
		return fencestore.Mark{}, false, fencestore.Unavailable(err)
	}
	if resource == "" {
		return fencestore.Mark{}, false, fmt.Errorf("redisstore: get: %w", errNoResource)
	}
	key := s.prefix + resource
	c, err := s.keyClient(ctx, key)
	if err != nil {
		return fencestore.Mark{}, false, fencestore.Unavailable(fmt.Errorf("redisstore: get %q: %w", key, err))
	}
	v, err := c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return fencestore.Mark{}, false, nil
	}
	if err != nil {
		return fencestore.Mark{}, false, fencestore.Unavailable(fmt.Errorf("redisstore: get %q: %w", key, err))
	}
	m, ok := fencestore.ParseMarkValue(v)
	if !ok {
		return fencestore.Mark{}, false, fencestore.Unavailable(fmt.Errorf("redisstore: get %q: corrupt mark %q", key, v))
	}
	return m, true, nil
}

// Raise sets resource's mark to m when m is above it or it has none, in one
// script run (raise.lua). A corrupt mark is an error, and stays: Reset
// repairs it.
func (s *Store) Raise(ctx context.Context, resource string, m fencestore.Mark) (old fencestore.Mark, had, changed bool, err error) {
	if err := ctx.Err(); err != nil {
		return old, false, false, fencestore.Unavailable(err)
	}
	if resource == "" {
		return old, false, false, fmt.Errorf("redisstore: raise: %w", errNoResource)
	}
	key := s.prefix + resource
	c, err := s.keyClient(ctx, key)
	if err != nil {
		return old, false, false, fencestore.Unavailable(fmt.Errorf("redisstore: raise %q: %w", key, err))
	}
	r, err := raiseScript.Run(ctx, c, []string{key}, markText(m)).Slice()
	if err != nil {
		return old, false, false, fencestore.Unavailable(fmt.Errorf("redisstore: raise %q: %w", key, err))
	}
	h, ok1 := intAt(r, 0)
	v, ok2 := stringAt(r, 1)
	ch, ok3 := intAt(r, 2)
	if len(r) != 3 || !ok1 || !ok2 || !ok3 {
		return old, false, false, fencestore.Unavailable(fmt.Errorf("redisstore: raise %q: unexpected reply %#v", key, r))
	}
	if h == 1 {
		if old, ok1 = fencestore.ParseMarkValue(v); !ok1 {
			return fencestore.Mark{}, false, false, fencestore.Unavailable(fmt.Errorf("redisstore: raise %q: unexpected old mark %q", key, v))
		}
	}
	return old, h == 1, ch == 1, nil
}

// Reset sets resource's mark to *m, or deletes it when m is nil, in one
// script run (reset.lua) that reads the old one. A corrupt old mark, or a
// key of another type, is replaced too and reported as had with the zero
// Mark.
func (s *Store) Reset(ctx context.Context, resource string, m *fencestore.Mark) (old fencestore.Mark, had bool, err error) {
	if err := ctx.Err(); err != nil {
		return old, false, fencestore.Unavailable(err)
	}
	if resource == "" {
		return old, false, fmt.Errorf("redisstore: reset: %w", errNoResource)
	}
	key := s.prefix + resource
	c, err := s.keyClient(ctx, key)
	if err != nil {
		return old, false, fencestore.Unavailable(fmt.Errorf("redisstore: reset %q: %w", key, err))
	}
	value := "" // delete
	if m != nil {
		value = markText(*m)
	}
	r, err := resetScript.Run(ctx, c, []string{key}, value).Slice()
	if err != nil {
		return old, false, fencestore.Unavailable(fmt.Errorf("redisstore: reset %q: %w", key, err))
	}
	h, ok1 := intAt(r, 0)
	v, ok2 := stringAt(r, 1)
	if len(r) != 2 || !ok1 || !ok2 {
		return old, false, fencestore.Unavailable(fmt.Errorf("redisstore: reset %q: unexpected reply %#v", key, r))
	}
	if h != 1 {
		return fencestore.Mark{}, false, nil
	}
	if old, ok1 = fencestore.ParseMarkValue(v); !ok1 {
		old = fencestore.Mark{} // a corrupt one, or a key of another type
	}
	return old, true, nil
}

func intAt(r []any, i int) (int64, bool) {
	if i >= len(r) {
		return 0, false
	}
	v, ok := r[i].(int64)
	return v, ok
}

func stringAt(r []any, i int) (string, bool) {
	if i >= len(r) {
		return "", false
	}
	v, ok := r[i].(string)
	return v, ok
}

// List returns up to limit marks (limit <= 0: all) whose resource names
// begin with prefix, from cursor ("" for the first page); next is "" after
// the last page. It SCANs with MATCH (the prefixes' glob characters
// escaped), server by server (every master of a Cluster, every live shard
// of a Ring, in address order), and GETs each key found in the same round
// trip per batch; it never runs KEYS. The order is SCAN's, not the names'.
// No page holds a mark twice; SCAN may return a key twice in a walk when
// the keyspace is resized meanwhile, so a walk may too (never less: a mark
// kept all through the walk is listed at least once). A corrupt mark, or a
// key of another type than a string (other than an in-flight key), fails
// the page with an error wrapping fencestore.ErrUnavailable that names it:
// Reset repairs it.
//
// A SCAN call may return more keys than the page has room for: the page
// then ends inside that batch, and the cursor says where: the batch's SCAN
// cursor, the cursor that call returned, and the greatest key of the batch
// already listed (the batch is listed in name order). The next page reads
// the batch again and skips what was listed, when SCAN returns the same
// cursor after it (the same stretch of the keyspace); otherwise (a resize)
// it lists the whole batch again.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]fencestore.Entry, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fencestore.Unavailable(err)
	}
	cur, err := parseListCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	nodes, err := s.nodes(ctx)
	if err != nil {
		return nil, "", err
	}
	full := s.prefix + prefix
	match := globEscape(full) + "*"
	// The node the cursor names, or the next one when it is gone.
	i := sort.Search(len(nodes), func(i int) bool { return nodes[i].addr >= cur.Node })
	var out []fencestore.Entry
	listed := make(map[string]bool)
	for ; i < len(nodes); i++ {
		n := nodes[i]
		if n.addr != cur.Node {
			cur = listCursor{Node: n.addr}
		}
		scan, count := cur.Scan, cur.Count
		if count <= 0 {
			count = scanCount(limit)
		}
		again := cur.Split
		for {
			need := math.MaxInt
			if limit > 0 {
				need = limit - len(out)
			}
			keys, next, err := n.c.Scan(ctx, scan, match, count).Result()
			if err != nil {
				return nil, "", fencestore.Unavailable(fmt.Errorf("redisstore: list: SCAN %s: %w", n.addr, err))
			}
			// A batch read again skips what the last page listed of it,
			// if it is the same stretch of the keyspace.
			skip := again && next == cur.End
			again = false
			cands := keys[:0]
			for _, k := range keys {
				if k == s.prefix || !strings.HasPrefix(k, full) || listed[k] || (skip && k <= cur.Last) {
					continue
				}
				cands = append(cands, k)
			}
			sort.Strings(cands)
			cands = dedupSorted(cands)
			entries, names, err := s.fetch(ctx, n.c, cands)
			if err != nil {
				return nil, "", err
			}
			if len(entries) > need {
				out = append(out, entries[:need]...)
				next := listCursor{Node: n.addr, Scan: scan, Count: count, End: next, Last: names[need-1], Split: true}
				return out, next.String(), nil
			}
			out = append(out, entries...)
			for _, k := range names {
				listed[k] = true
			}
			if next == 0 {
				break
			}
			scan = next
			// Few matches per call: a sparse prefix; read more per call.
			if len(entries) < need && count < maxScanCount {
				count *= 2
			}
			if limit > 0 && len(out) == limit {
				return out, listCursor{Node: n.addr, Scan: scan, Count: count}.String(), nil
			}
		}
		if limit > 0 && len(out) == limit {
			if i+1 < len(nodes) {
				return out, listCursor{Node: nodes[i+1].addr}.String(), nil
			}
			return out, "", nil
		}
	}
	return out, "", nil
}

// maxScanCount bounds the COUNT of List's SCAN calls.
const maxScanCount = 4096

// scanCount is the COUNT of a List's first SCAN call for a page of limit.
func scanCount(limit int) int64 {
	switch {
	case limit <= 0 || limit > 1024:
		return 1024
	case limit < 16:
		return 16
	}
	return int64(limit)
}

func dedupSorted(keys []string) []string {
	out := keys[:0]
	for i, k := range keys {
		if i == 0 || k != keys[i-1] {
			out = append(out, k)
		}
	}
	return out
}

// fetch GETs keys on c in one pipeline and returns the marks, in keys'
// order, and their keys; a key gone meanwhile, or an in-flight key, is
// left out.
func (s *Store) fetch(ctx context.Context, c redis.Cmdable, keys []string) ([]fencestore.Entry, []string, error) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	entries := make([]fencestore.Entry, 0, len(keys))
	names := make([]string, 0, len(keys))
	for i, k := range keys {
		v, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
			if isFlightKeyName(k) {
				continue
			}
			return nil, nil, fencestore.Unavailable(fmt.Errorf("redisstore: list: %q holds no mark: %w", k, err))
		case err != nil:
			return nil, nil, fencestore.Unavailable(fmt.Errorf("redisstore: list: GET %q: %w", k, err))
		}
		m, ok := fencestore.ParseMarkValue(v)
		if !ok {
			return nil, nil, fencestore.Unavailable(fmt.Errorf("redisstore: list: corrupt mark %q at %q", v, k))
		}
		entries = append(entries, fencestore.Entry{Resource: k[len(s.prefix):], Mark: m})
		names = append(names, k)
	}
	return entries, names, nil
}

// listCursor is where List goes on: a node (its address; "" for the one
// server of a plain or Sentinel client), the SCAN cursor and COUNT there,
// and, when a page ended inside a batch (Split), the cursor that batch's
// SCAN returned and the greatest key of it listed.
type listCursor struct {
	Node  string `json:"n,omitempty"`
	Scan  uint64 `json:"c,omitempty"`
	Count int64  `json:"k,omitempty"`
	Split bool   `json:"s,omitempty"`
	End   uint64 `json:"e,omitempty"`
	Last  string `json:"l,omitempty"`
}

// String encodes c as an opaque cursor.
func (c listCursor) String() string {
	b, _ := json.Marshal(c) // a struct of strings and numbers always encodes
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseListCursor(s string) (listCursor, error) {
	var c listCursor
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Count < 0 {
		return listCursor{}, fmt.Errorf("redisstore: list: %q is not a cursor List returned", s)
	}
	return c, nil
}

// globEscape escapes the glob characters of s for SCAN's MATCH, so that
// the pattern matches s itself.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// isFlightKeyName reports whether k is named as an in-flight key
// (flightKey) of some mark key: "<mark>:inflight" for a mark with a hash
// tag, "{<mark>}:inflight" for one without. A resource may be named so too;
// only the key's type (a sorted set) tells them apart.
func isFlightKeyName(k string) bool {
	m, ok := strings.CutSuffix(k, flightSuffix)
	if !ok {
		return false
	}
	if hasHashTag(m) {
		return true
	}
	if inner, ok := strings.CutPrefix(m, "{"); ok {
		if inner, ok := strings.CutSuffix(inner, "}"); ok {
			f, _ := flightKey(inner)
			return f == k
		}
	}
	return false
}

// node is one server of the store, by its address ("" for the one server
// of a plain or Sentinel client).
type node struct {
	addr string
	c    redis.Cmdable
}

// nodes returns the servers that hold the store's keys, by address: the
// one of a plain or Sentinel client, every master of a Cluster, every live
// shard of a Ring.
func (s *Store) nodes(ctx context.Context) ([]node, error) {
	var out []node
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			out = append(out, node{addr: m.Options().Addr, c: m})
			return nil
		})
		if err != nil {
			return nil, fencestore.Unavailable(fmt.Errorf("redisstore: the cluster's masters: %w", err))
		}
	case *redis.Ring:
		for _, sh := range c.GetShardClients() {
			out = append(out, node{addr: sh.Options().Addr, c: sh})
		}
	default:
		return []node{{c: s.client}}, nil
	}
	if len(out) == 0 {
		return nil, fencestore.Unavailable(errors.New("redisstore: no server to read: no master, or no live shard"))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out, nil
}

// keyClient returns a client for commands on key: on a Cluster the node
// client of its master (which does not re-send a command after a lost
// reply, as the ClusterClient does; see execNodes), else the store's own
// client (a Ring routes by key itself).
func (s *Store) keyClient(ctx context.Context, key string) (redis.Cmdable, error) {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, key)
	}
	return s.client, nil
}
