package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Settings are the settings of one Redis server that decide whether it keeps
// the marks it acknowledged: whether it may evict them, and what a crash or a
// restart loses of them.
type Settings struct {
	// Node is the address of the cluster master (or ring shard) they were
	// read from; "" for the one server a plain or Sentinel client reaches.
	Node            string
	MaxmemoryPolicy string // e.g. "noeviction", "allkeys-lru"
	AppendOnly      string // "yes" or "no"
	AppendFsync     string // "always", "everysec" or "no"
	// NoAppendfsyncOnRewrite is "yes" when Redis skips the fsync of the
	// AOF while a child process runs (a BGSAVE, an AOF rewrite, a
	// replica's full sync): it then replies before any fsync, whatever
	// appendfsync says.
	NoAppendfsyncOnRewrite string
}

// settingNames are read with one CONFIG GET each: several names in one
// CONFIG GET need Redis 7.
var settingNames = [...]string{"maxmemory-policy", "appendonly", "appendfsync", "no-appendfsync-on-rewrite"}

// Settings reads maxmemory-policy, appendonly, appendfsync and
// no-appendfsync-on-rewrite (CONFIG GET)
// from the server admissions reach, or from every master of a cluster client
// (every shard of a ring), in one round trip per node; several nodes come
// sorted by Node. An error wrapping fencestore.ErrUnavailable means a server
// did not answer (not even PING, which goes first in the same pipeline); any
// other error means one answered but refused CONFIG GET (disabled, renamed,
// or denied by ACL, as on many managed services), and says which node.
func (s *Store) Settings(ctx context.Context) ([]Settings, error) {
	type forEacher func(context.Context, func(context.Context, *redis.Client) error) error
	var each forEacher
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		each = c.ForEachMaster
	case *redis.Ring:
		each = c.ForEachShard
	default:
		st, err := readSettings(ctx, s.client)
		if err != nil {
			return nil, err
		}
		return []Settings{st}, nil
	}
	var (
		mu       sync.Mutex
		out      []Settings
		nodeErrs []error
	)
	err := each(ctx, func(ctx context.Context, node *redis.Client) error {
		st, err := readSettings(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			err = fmt.Errorf("node %s: %w", node.Options().Addr, err)
			nodeErrs = append(nodeErrs, err)
			return err
		}
		st.Node = node.Options().Addr
		out = append(out, st)
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case len(nodeErrs) > 0:
		// Unavailable if any node did not answer: a refusal of CONFIG by
		// another shows again once all answer.
		sort.Slice(nodeErrs, func(i, j int) bool { return nodeErrs[i].Error() < nodeErrs[j].Error() })
		return nil, errors.Join(nodeErrs...)
	case err != nil:
		// Not a node's answer: the client could not learn the masters.
		return nil, fencestore.Unavailable(fmt.Errorf("redisstore: settings: %w", err))
	case len(out) == 0:
		return nil, fencestore.Unavailable(errors.New("redisstore: settings: the cluster names no master"))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// readSettings reads the settings of the one server c reaches.
func readSettings(ctx context.Context, c redis.Cmdable) (Settings, error) {
	var ping *redis.StatusCmd
	var gets [len(settingNames)]*redis.MapStringStringCmd
	// Each command keeps its own error; Exec's is the first of them, or
	// the connection's, which no command carries (a failed AUTH, say).
	_, execErr := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		ping = p.Ping(ctx)
		for i, name := range settingNames {
			gets[i] = p.ConfigGet(ctx, name)
		}
		return nil
	})
	if ping.Err() != nil || ping.Val() != "PONG" {
		err := ping.Err()
		if err == nil {
			err = execErr
		}
		if err == nil {
			err = fmt.Errorf("unexpected reply %q", ping.Val())
		}
		return Settings{}, fencestore.Unavailable(fmt.Errorf("redisstore: settings: PING: %w", err))
	}
	var vals [len(settingNames)]string
	var refused *RefusedError
	for i, name := range settingNames {
		m, err := gets[i].Result()
		if err != nil {
			var re redis.Error
			if !errors.As(err, &re) {
				// The connection, not the server.
				return Settings{}, fencestore.Unavailable(fmt.Errorf("redisstore: settings: CONFIG GET %s: %w", name, err))
			}
		} else if v, ok := m[name]; ok {
			vals[i] = v
			continue
		} else {
			err = errors.New("no such parameter in the reply")
		}
		if refused == nil {
			refused = &RefusedError{}
		}
		refused.Settings = append(refused.Settings, name)
		refused.Errs = append(refused.Errs, err)
	}
	if refused != nil {
		return Settings{}, refused
	}
	return Settings{MaxmemoryPolicy: vals[0], AppendOnly: vals[1], AppendFsync: vals[2], NoAppendfsyncOnRewrite: vals[3]}, nil
}

// RefusedError reports a server that answered but would not tell one or
// more settings (CONFIG disabled, renamed, or denied by ACL, as on many
// managed services): the setting names and, for each, the server's reply,
// which Redis words after the command ("ERR unknown command 'CONFIG', with
// args beginning with: 'GET' 'appendonly'"). For quotes only the settings a
// check is about.
type RefusedError struct {
	Settings []string // in the order of the CONFIG GETs
	Errs     []error  // the reply to each
}

func (e *RefusedError) Error() string {
	if len(e.Settings) == 0 {
		return "redisstore: settings: refused"
	}
	return fmt.Sprintf("redisstore: settings: CONFIG GET %s: %v", e.Settings[0], e.Errs[0])
}

// For returns the refusal of the first of names the server refused, as
// "CONFIG GET name: reply", or nil if it refused none of them.
func (e *RefusedError) For(names ...string) error {
	for i, s := range e.Settings {
		for _, n := range names {
			if s == n {
				return fmt.Errorf("redisstore: settings: CONFIG GET %s: %w", s, e.Errs[i])
			}
		}
	}
	return nil
}

// EvictionRisk says how the maxmemory-policy can lose marks, or "" when it
// cannot (see PolicyMayEvict). An evicted mark admits stale tokens again.
func (st Settings) EvictionRisk() string {
	if !PolicyMayEvict(st.MaxmemoryPolicy) {
		return ""
	}
	return "maxmemory-policy is " + st.MaxmemoryPolicy + ", which can evict marks"
}

// PersistenceRisk says what a crash or restart of the server can lose of the
// marks it acknowledged, or "" when nothing can: with appendonly yes,
// appendfsync always and no-appendfsync-on-rewrite no, Redis writes and
// fsyncs each write to the AOF before it replies. A lost mark admits stale
// tokens again until a newer one arrives.
func (st Settings) PersistenceRisk() string {
	switch {
	case st.AppendOnly != "yes":
		return "appendonly is " + st.AppendOnly + ": a crash loses every mark written since the last RDB snapshot, " +
			"and without snapshots (save \"\") any restart loses every mark"
	case st.AppendFsync == "always" && st.NoAppendfsyncOnRewrite == "yes":
		// Redis's flushAppendOnlyFile skips the fsync while a child runs,
		// and replies anyway.
		return "no-appendfsync-on-rewrite is yes: while Redis has a child process (a BGSAVE, an AOF rewrite, a replica's sync) " +
			"it replies before any fsync, and a crash then loses the marks it acknowledged"
	case st.AppendFsync == "always":
		return ""
	case st.AppendFsync == "everysec":
		// Redis write()s the AOF before it replies and fsyncs it once a
		// second; while an fsync is slow it holds the write() back too, up
		// to two seconds, and then a crash of the process alone loses them.
		return "appendfsync is everysec: a crash can lose up to about a second of acknowledged marks, two when the disk is slow"
	case st.AppendFsync == "no":
		return "appendfsync is no: a crash of the Redis host loses the acknowledged marks the OS had not yet written to disk " +
			"(on Linux typically up to 30 seconds of them)"
	}
	return "appendfsync is " + st.AppendFsync + ", a value fenceproxy does not know: a crash may lose acknowledged marks"
}
