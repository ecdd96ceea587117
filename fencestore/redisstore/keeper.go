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
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The operator's side (fencestore.Keeper); doc.go has the layout.
//
// The identity record is the key KeyPrefix itself: every resource name is
// non-empty, so no mark key is it, and it is inside the prefix, so an ACL
// pattern ~<prefix>* covers it (with an empty prefix it is the empty key,
// which Redis allows). Once Expect names it, admit.lua reads it in every
// run and refuses the run's admissions when it is not the one expected.
// On a Ring every shard holds a copy of it (Init writes them all), and
// each admission checks the copy on its own shard, in its script run. On a
// Cluster (whose prefix has no hash tag) every slot holds a copy under a
// name of its own (slots.go), and each admission checks the copy in its
// mark's slot, in its script run.

var _ fencestore.Keeper = (*Store)(nil)

// errNoResource refuses an empty resource name: its key would be the
// identity record's.
var errNoResource = errors.New("empty resource name (the key prefix alone is the store's identity record)")

// errCopiesDisagree is in the error of Identity when the copies of the
// record (on a Ring's shards, in a Cluster's slots) differ.
var errCopiesDisagree = errors.New("the copies of the identity record differ")

// copiesDisagree is the errCopiesDisagree of Identity, with the records
// the copies hold (one each, "" for none), which a forced Init stamps its
// record after (fencestore.ForceOver).
type copiesDisagree struct{ held []string }

func (e *copiesDisagree) Error() string        { return errCopiesDisagree.Error() }
func (e *copiesDisagree) Is(target error) bool { return target == errCopiesDisagree }

// markKey is resource's mark key, or why resource has none: an empty name,
// or (on a Cluster with a prefix of '{' alone, slots.go) a name that spells
// an identity record.
func (s *Store) markKey(op, resource string) (string, error) {
	if resource == "" {
		return "", fmt.Errorf("redisstore: %s: %w", op, errNoResource)
	}
	key := s.prefix + resource
	if s.isRecord(key) {
		return "", fmt.Errorf("redisstore: %s %q: the key is the name of the store's identity record in its slot", op, key)
	}
	return key, nil
}

// isRecord reports whether key is one of a Cluster's per-slot identity
// records that a mark key or a SCAN of the prefix can meet.
func (s *Store) isRecord(key string) bool {
	return s.spellable && s.records != nil && s.records.is(key)
}

// recordFor is the name of the identity record an admission of key checks:
// the one in key's slot on a Cluster, else the prefix.
func (s *Store) recordFor(key string) (string, error) {
	switch {
	case s.recordsErr != nil:
		return "", s.recordsErr
	case s.records != nil:
		return s.records.forKey(key), nil
	}
	return s.prefix, nil
}

// Identity returns the identity record, "" when there is none. On a Ring
// every live shard, and on a Cluster every slot, must hold the same one:
// copies that disagree (a shard or a master was emptied or replaced) are
// an error, which only Init with force ends.
func (s *Store) Identity(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fencestore.Unavailable(err)
	}
	switch {
	case s.recordsErr != nil:
		return "", s.recordsErr
	case s.records != nil:
		return s.clusterIdentity(ctx)
	}
	if _, ok := s.client.(*redis.Ring); ok {
		return s.ringIdentity(ctx)
	}
	c, err := s.keyClient(ctx, s.prefix)
	if err != nil {
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: identity: %w", err))
	}
	return readIdentity(ctx, c, s.prefix)
}

// readIdentity reads the identity record key through c.
func readIdentity(ctx context.Context, c redis.Cmdable, key string) (string, error) {
	return identityValue(key, c.Get(ctx, key))
}

// identityValue is the identity record key read by get: "" for none.
func identityValue(key string, get *redis.StringCmd) (string, error) {
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: the identity key %q holds no identity record: %w", key, err))
	case err != nil:
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: identity %q: %w", key, err))
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
	var held, values []string
	for i, n := range nodes {
		v, err := readIdentity(ctx, n.c, s.prefix)
		if err != nil {
			return "", fmt.Errorf("shard %s: %w", n.addr, err)
		}
		if i == 0 {
			id = v
		}
		values = append(values, v)
		held = append(held, fmt.Sprintf("%s holds %q", n.addr, v))
		if v != id {
			id = "\x00" // they disagree
		}
	}
	if id == "\x00" {
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: %w: the ring's shards hold different ones (%s): "+
			"a shard was emptied or replaced, and its marks may be gone", &copiesDisagree{held: values}, strings.Join(held, ", ")))
	}
	return id, nil
}

// clusterIdentity reads the record of every slot (the cluster client's
// pipeline sends each master its own).
func (s *Store) clusterIdentity(ctx context.Context) (string, error) {
	slots := make([]int, clusterSlots)
	for i := range slots {
		slots[i] = i
	}
	found, err := s.readRecords(ctx, slots)
	if err != nil {
		return "", err
	}
	held := make(map[string][]int)
	for slot, v := range found {
		held[v] = append(held[v], slot)
	}
	if len(held) == 1 {
		return found[0], nil
	}
	var parts, values []string
	for v, slots := range held {
		values = append(values, v)
		what := fmt.Sprintf("hold %q", v)
		if v == "" {
			what = "hold none"
		}
		parts = append(parts, fmt.Sprintf("%d slots (%s) %s", len(slots), slotRanges(slots), what))
	}
	sort.Strings(parts)
	return "", fencestore.Unavailable(fmt.Errorf("redisstore: %w: the cluster's slots hold different ones (%s): "+
		"a master was emptied or replaced, and the marks of its slots may be gone", &copiesDisagree{held: values}, strings.Join(parts, "; ")))
}

// readRecords reads the identity records of slots, in one pipeline.
func (s *Store) readRecords(ctx context.Context, slots []int) ([]string, error) {
	pipe := s.client.Pipeline()
	gets := make([]*redis.StringCmd, len(slots))
	for i, slot := range slots {
		gets[i] = pipe.Get(ctx, s.records.name(slot))
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	found := make([]string, len(slots))
	for i, g := range gets {
		v, err := identityValue(s.records.name(slots[i]), g)
		if err != nil {
			return nil, err
		}
		found[i] = v
	}
	return found, nil
}

// slotRanges spells ascending slots as ranges, the first few of them.
func slotRanges(slots []int) string {
	var out []string
	for i := 0; i < len(slots); {
		j := i
		for j+1 < len(slots) && slots[j+1] == slots[j]+1 {
			j++
		}
		if len(out) == 4 {
			out = append(out, "...")
			break
		}
		if i == j {
			out = append(out, strconv.Itoa(slots[i]))
		} else {
			out = append(out, fmt.Sprintf("%d-%d", slots[i], slots[j]))
		}
		i = j + 1
	}
	return strings.Join(out, ",")
}

// Init writes a new identity record: SET NX without force, so that of two
// replicas that start on an empty store at once one wins. A Ring has a
// copy on every live shard and a Cluster one in every slot
// (initCopies).
func (s *Store) Init(ctx context.Context, force bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fencestore.Unavailable(err)
	}
	id := fencestore.NewIdentity()
	if force {
		// Only a lost store (no record, a lost record, copies that
		// disagree) or one an operator forced before is forced again,
		// stamped after every copy (fencestore.ForceOver).
		held, err := s.Identity(ctx)
		copies := []string{held}
		var cd *copiesDisagree
		if errors.As(err, &cd) {
			copies, err = cd.held, nil
		}
		if err != nil {
			return "", err
		}
		if id, err = fencestore.ForceOver(copies...); err != nil {
			return "", err
		}
	}
	set := func(c redis.Cmdable, key string) error {
		if force {
			return c.Set(ctx, key, id, 0).Err()
		}
		ok, err := c.SetNX(ctx, key, id, 0).Result()
		if err == nil && !ok {
			return fencestore.ErrIdentityExists
		}
		return err
	}
	var err error
	switch ring, isRing := s.client.(*redis.Ring); {
	case s.recordsErr != nil:
		err = s.recordsErr
	case s.records != nil:
		err = s.clusterInit(ctx, force, id, set)
	case isRing:
		err = s.ringInit(ctx, ring, force, set)
	default:
		var c redis.Cmdable
		if c, err = s.keyClient(ctx, s.prefix); err == nil {
			err = set(c, s.prefix)
		}
	}
	if err != nil {
		return "", initError(err)
	}
	return id, nil
}

// initCopies writes a record that has several copies: without force only
// when no copy exists (Identity finds none), then the anchor, where of two
// Inits at once one wins before the other writes anything else, then the
// rest.
func (s *Store) initCopies(ctx context.Context, force bool, anchor, rest func() error) error {
	if !force {
		v, err := s.Identity(ctx)
		if errors.Is(err, errCopiesDisagree) {
			// Some copy exists.
			return fmt.Errorf("%w (%v)", fencestore.ErrIdentityExists, err)
		}
		if err != nil {
			return err
		}
		if v != "" {
			return fencestore.ErrIdentityExists
		}
	}
	if err := anchor(); err != nil {
		return err
	}
	return rest()
}

// ringInit writes every live shard's copy, the shard the prefix maps to
// first.
func (s *Store) ringInit(ctx context.Context, ring *redis.Ring, force bool, set func(redis.Cmdable, string) error) error {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return err
	}
	anchor, err := ring.GetShardClientForKey(s.prefix)
	if err != nil {
		return err
	}
	return s.initCopies(ctx, force, func() error {
		if err := set(anchor, s.prefix); err != nil {
			return fmt.Errorf("shard %s: %w", anchor.Options().Addr, err)
		}
		return nil
	}, func() error {
		for _, n := range nodes {
			if n.addr == anchor.Options().Addr {
				continue
			}
			if err := set(n.c, s.prefix); err != nil {
				return fmt.Errorf("shard %s: %w", n.addr, err)
			}
		}
		return nil
	})
}

// clusterInit writes every slot's copy, slot 0's first (on its master's
// own client: a SET NX the cluster client re-sent after a lost reply would
// find its own record), the rest in one pipeline.
func (s *Store) clusterInit(ctx context.Context, force bool, id string, set func(redis.Cmdable, string) error) error {
	return s.initCopies(ctx, force, func() error {
		anchor := s.records.name(0)
		c, err := s.keyClient(ctx, anchor)
		if err != nil {
			return err
		}
		return set(c, anchor)
	}, func() error {
		pipe := s.client.Pipeline()
		for slot := 1; slot < clusterSlots; slot++ {
			pipe.Set(ctx, s.records.name(slot), id, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("the identity records of every slot: %w", err)
		}
		return nil
	})
}

func initError(err error) error {
	if errors.Is(err, fencestore.ErrIdentityExists) || errors.Is(err, fencestore.ErrUnavailable) {
		return err
	}
	return fencestore.Unavailable(fmt.Errorf("redisstore: init: %w", err))
}

// Expect makes every later admission check that the identity record is id
// (id "" turns the check off). A record other than the one expected before
// starts a new history: the generations seen are forgotten.
func (s *Store) Expect(id string) {
	if old := s.expect.Swap(&id); old == nil || *old != id {
		s.gens.Forget()
	}
}

// pingIdentity checks the identity record once Expect named one: on every
// live shard of a Ring; on a Cluster the record of the first slot of each
// range of slots a master serves (a master emptied, restarted without
// persistence or failed over to an empty replica lost all of its); else
// the one record.
func (s *Store) pingIdentity(ctx context.Context) error {
	want := s.expect.Load()
	if want == nil || *want == "" {
		return nil
	}
	var found []string
	var slots []int // a Cluster's slots read
	switch _, isRing := s.client.(*redis.Ring); {
	case s.recordsErr != nil:
		return s.recordsErr
	case s.records != nil:
		ranges, err := s.client.ClusterSlots(ctx).Result()
		if err != nil {
			return fencestore.Unavailable(fmt.Errorf("redisstore: identity: CLUSTER SLOTS: %w", err))
		}
		starts := make([]int, len(ranges))
		for i, r := range ranges {
			starts[i] = int(r.Start)
		}
		slots = starts
		if found, err = s.readRecords(ctx, starts); err != nil {
			return err
		}
	case isRing:
		nodes, err := s.nodes(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			v, err := readIdentity(ctx, n.c, s.prefix)
			if err != nil {
				return err
			}
			found = append(found, v)
		}
	default:
		c, err := s.keyClient(ctx, s.prefix)
		if err != nil {
			return fencestore.Unavailable(fmt.Errorf("redisstore: identity: %w", err))
		}
		v, err := readIdentity(ctx, c, s.prefix)
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
	return s.pingGenerations(ctx, *want, slots)
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
				if k == s.prefix || !strings.HasPrefix(k, s.prefix) || s.isRecord(k) {
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
	key, err := s.markKey("get", resource)
	if err != nil {
		return fencestore.Mark{}, false, err
	}
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
	key, err := s.markKey("raise", resource)
	if err != nil {
		return old, false, false, err
	}
	c, err := s.keyClient(ctx, key)
	if err != nil {
		return old, false, false, fencestore.Unavailable(fmt.Errorf("redisstore: raise %q: %w", key, err))
	}
	r, err := raiseScript.Run(ctx, c, s.operatorKeys(key), markText(m)).Slice()
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
	key, err := s.markKey("reset", resource)
	if err != nil {
		return old, false, err
	}
	c, err := s.keyClient(ctx, key)
	if err != nil {
		return old, false, fencestore.Unavailable(fmt.Errorf("redisstore: reset %q: %w", key, err))
	}
	value := "" // delete
	if m != nil {
		value = markText(*m)
	}
	r, err := resetScript.Run(ctx, c, s.operatorKeys(key), value).Slice()
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

// operatorKeys is the keys of an operator's script on the mark key key:
// key, and its generation key when the store keeps one.
func (s *Store) operatorKeys(key string) []string {
	if gkey, _ := s.generationFor(key); gkey != "" {
		return []string{key, gkey}
	}
	return []string{key}
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
				if k == s.prefix || !strings.HasPrefix(k, full) || s.isRecord(k) || listed[k] || (skip && k <= cur.Last) {
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
