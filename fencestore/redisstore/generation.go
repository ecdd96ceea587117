package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The store generation (fencestore/generation.go) on Redis: a hash beside
// each identity record, field g the generation and op the generation of
// the operator's last Raise or Reset. admit.lua reads it with the identity
// record, refuses the run when g is below the generation the replica has
// seen there (passed in as an argument: no round trip of its own), and
// advances g in the same run when it writes a mark; raise.lua and reset.lua
// advance g and set op. Its name begins with '{', as every key that is not
// a mark does (keys.go), so no resource name under a valid prefix spells
// it:
//
//	{<prefix>}:generation           single server, Sentinel
//	{<prefix><tag>}:generation      Cluster, the slot's own (slots.go)
//	{<tag>}:generation:<prefix>     a prefix with a hash tag <tag>
//
// A Ring keeps no generation (each shard would need its own, which a
// replica cannot tell apart by name): its admissions check the identity
// only.

const generationSuffix = ":generation"

// generationFor is the generation key an admission of key checks and
// advances, and its part of Store.gens; "" when the store keeps none.
func (s *Store) generationFor(key string) (string, int) {
	switch {
	case s.records != nil:
		slot := keySlot(key)
		return s.records.generation(slot), slot
	case s.recordsErr != nil:
		return "", 0
	}
	if _, ring := s.client.(*redis.Ring); ring {
		return "", 0
	}
	return besideKey(s.prefix, generationSuffix), 0
}

// generation is the generation key of slot.
func (r *slotRecords) generation(slot int) string {
	t := r.tags[slot]
	return "{" + r.prefix + string(t[:]) + "}" + generationSuffix
}

// Generation returns the generation of the part of the store that holds
// resource, and the generation of the operator's last change of marks
// there.
func (s *Store) Generation(ctx context.Context, resource string) (gen, op uint64, err error) {
	key, err := s.markKey("generation", resource)
	if err != nil {
		return 0, 0, err
	}
	gkey, _ := s.generationFor(key)
	if gkey == "" {
		return 0, 0, nil
	}
	c, err := s.keyClient(ctx, gkey)
	if err != nil {
		return 0, 0, fencestore.Unavailable(fmt.Errorf("redisstore: generation: %w", err))
	}
	return readGeneration(ctx, c, gkey)
}

// readGeneration reads the generation hash gkey through c.
func readGeneration(ctx context.Context, c redis.Cmdable, gkey string) (gen, op uint64, err error) {
	v, err := c.HMGet(ctx, gkey, "g", "op").Result()
	if err != nil {
		return 0, 0, fencestore.Unavailable(fmt.Errorf("redisstore: generation %q: %w", gkey, err))
	}
	var out [2]uint64
	for i, x := range v {
		if x == nil {
			continue
		}
		text, _ := x.(string)
		n, f := fencestore.ParseDecimal(text)
		if f != fencestore.DecimalOK {
			return 0, 0, fencestore.Unavailable(fmt.Errorf("redisstore: corrupt generation %q at %q", text, gkey))
		}
		out[i] = n
	}
	return out[0], out[1], nil
}

// pingGenerations compares the generation of the parts Ping reads (the
// one part, or the first slot of each range a Cluster master serves) with
// the greatest seen there: an idle replica notices a store gone back in
// time too. The greatest seen is taken before the read is sent: an
// admission answered while the read is on its way may advance it past what
// the read could have found, which is no rollback.
func (s *Store) pingGenerations(ctx context.Context, want string, slots []int) error {
	if s.records == nil {
		gkey, part := s.generationFor(s.prefix + "x")
		if gkey == "" {
			return nil
		}
		c, err := s.keyClient(ctx, gkey)
		if err != nil {
			return fencestore.Unavailable(fmt.Errorf("redisstore: generation: %w", err))
		}
		seen := s.gens.Seen(part)
		g, _, err := readGeneration(ctx, c, gkey)
		if err != nil {
			return err
		}
		return fencestore.Rollback(want, seen, g)
	}
	for _, slot := range slots {
		gkey := s.records.generation(slot)
		c, err := s.keyClient(ctx, gkey)
		if err != nil {
			return fencestore.Unavailable(fmt.Errorf("redisstore: generation: %w", err))
		}
		seen := s.gens.Seen(slot)
		g, _, err := readGeneration(ctx, c, gkey)
		if err != nil {
			return err
		}
		if err := fencestore.Rollback(want, seen, g); err != nil {
			return err
		}
	}
	return nil
}

// MarkLost writes a lost record in place of the identity record (every
// copy of it on a Cluster or Ring), except where the record supersedes
// want (an operator forced it since): marklost.lua decides per copy. It
// returns the record the first copy holds after it.
func (s *Store) MarkLost(ctx context.Context, want string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fencestore.Unavailable(err)
	}
	lost := fencestore.LostRecord(want)
	run := func(c redis.Scripter, key string) (string, error) {
		return markLostScript.Run(ctx, c, []string{key}, lost, want).Text()
	}
	var (
		held string
		err  error
	)
	switch ring, isRing := s.client.(*redis.Ring); {
	case s.recordsErr != nil:
		return "", s.recordsErr
	case s.records != nil:
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, clusterSlots)
		for slot := range clusterSlots {
			cmds[slot] = markLostScript.Eval(ctx, pipe, []string{s.records.name(slot)}, lost, want)
		}
		_, err = pipe.Exec(ctx)
		if err == nil {
			held, err = cmds[0].Text()
		}
	case isRing:
		var nodes []node
		if nodes, err = s.nodes(ctx); err == nil {
			for i, n := range nodes {
				c, _ := n.c.(redis.Scripter)
				var v string
				if v, err = run(c, s.prefix); err != nil {
					break
				}
				if i == 0 {
					held = v
				}
			}
		}
		_ = ring
	default:
		held, err = run(s.client, s.prefix)
	}
	if err != nil {
		return "", fencestore.Unavailable(fmt.Errorf("redisstore: mark lost: %w", err))
	}
	return held, nil
}

// besideKey names a key kept beside key (in its slot) for something else
// than a mark: "{<tag>}<suffix>:<key>" when key has a hash tag, else
// "{<key>}<suffix>" when key has no '}', else "{}<suffix>:<key>" (no slot
// of its own: only a single server can use it). Each form begins with '{',
// which no mark key under a valid prefix does (keys.go), and each can be
// read back to the one key it serves.
func besideKey(key, suffix string) string {
	if tag, ok := hashTag(key); ok {
		return "{" + tag + "}" + suffix + ":" + key
	}
	if !strings.Contains(key, "}") && key != "" {
		return "{" + key + "}" + suffix
	}
	return "{}" + suffix + ":" + key
}

// hashTag is key's hash tag, when it has one (Redis's rule: the first
// '{', then the first '}' after it, something between).
func hashTag(key string) (string, bool) {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return "", false
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 {
		return "", false
	}
	return key[s+1 : s+1+e], true
}

// ErrNestedPrefix is wrapped by Nesting's error.
var ErrNestedPrefix = errors.New("the key prefix nests inside another deployment's")

// Nesting reports a key prefix that begins with the prefix of another
// deployment on the same Redis (`fence:billing:` inside `fence:`): its keys
// would be marks of the other (`billing:...`), and its identity record one
// of them. It reads the identity record each shorter prefix would have (a
// value shaped as one: 32 hex digits, a forced or a lost record): on one
// server, in one pipeline; on a Ring, on every shard (each keeps a copy of
// the record); on a Cluster, one GET per shorter prefix of its record in
// either form (the prefix itself, and the copy a prefix without a hash tag
// keeps in the slot of its first tag), which go-redis routes to the slot's
// master. Not with a user of its own (an ACL that grants the prefix's keys
// only).
func (s *Store) Nesting(ctx context.Context) error {
	if s.recordsErr != nil || len(s.prefix) < 2 {
		return nil
	}
	if s.aclUser() {
		// A user of its own is usually granted the prefix's keys only:
		// reading the shorter prefixes would be refused, and logged as
		// a denial.
		return nil
	}
	var keys, owners []string
	for i := 1; i < len(s.prefix); i++ {
		p := s.prefix[:i]
		keys, owners = append(keys, p), append(owners, p)
		if s.isClusterClient() && !strings.Contains(p, "}") {
			keys, owners = append(keys, clusterRecord(p)), append(owners, p)
		}
	}
	vals, err := s.nestingReads(ctx, keys)
	if err != nil && redis.HasErrorPrefix(err, "NOPERM") {
		// An ACL that grants the prefix's keys only: the shorter
		// prefixes cannot be read, and are not checked.
		return nil
	}
	if err != nil {
		return fencestore.Unavailable(fmt.Errorf("redisstore: nesting: %w", err))
	}
	for i, v := range vals {
		if fencestore.IdentityShaped(v) {
			return fmt.Errorf("%w: %q holds the identity record of a deployment with prefix %q; "+
				"use a prefix that no other deployment's is a beginning of", ErrNestedPrefix, s.prefix, owners[i])
		}
	}
	return nil
}

// clusterRecord is the identity record a deployment with prefix p (no
// hash tag) keeps on a Cluster in the slot of its first tag: every slot
// holds a copy, so one is enough to find it.
func clusterRecord(p string) string {
	t := tagAlphabet[:1]
	return "{" + p + t + t + t + recordSuffix
}

// nestingReads reads keys as strings ("" for a missing key or one of
// another type): one MGET on a server, on every shard of a Ring, one GET
// each on a Cluster (the keys are in many slots).
func (s *Store) nestingReads(ctx context.Context, keys []string) ([]string, error) {
	out := make([]string, len(keys))
	mget := func(c redis.Cmdable) error {
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for i, v := range vals {
			if text, ok := v.(string); ok && fencestore.IdentityShaped(text) {
				out[i] = text
			}
		}
		return nil
	}
	switch c := s.client.(type) {
	case *redis.Ring:
		nodes, err := s.nodes(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if err := mget(n.c); err != nil {
				return nil, err
			}
		}
		return out, nil
	case *redis.ClusterClient:
		for i, k := range keys {
			v, err := c.Get(ctx, k).Result()
			switch {
			case errors.Is(err, redis.Nil), err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
			case err != nil:
				return nil, err
			default:
				out[i] = v
			}
		}
		return out, nil
	}
	if err := mget(s.client); err != nil {
		return nil, err
	}
	return out, nil
}

// aclUser reports whether the client logs in as a user of its own (not
// the default user).
func (s *Store) aclUser() bool {
	var user string
	switch c := s.client.(type) {
	case *redis.Client:
		user = c.Options().Username
	case *redis.ClusterClient:
		user = c.Options().Username
	}
	return user != "" && user != "default"
}

func (s *Store) isClusterClient() bool {
	_, ok := s.client.(*redis.ClusterClient)
	return ok
}
