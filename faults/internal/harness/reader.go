package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// reader reads every resource's mark straight from the store (Redis: MGET;
// etcd: one linearizable range read; either one atomic snapshot), as
// operations of the history: a mark that goes backwards in the store shows
// here even when no request happens to expose it.
type reader struct {
	c redis.UniversalClient // nil when fetch reads another store
	// fetch reads every mark, in the order of keys (0: none); nil means
	// MGET on c.
	fetch func(ctx context.Context, keys []string) ([]uint64, error)
	// fetchSome, when set, reads what it can (a Cluster: shard by shard);
	// ok says which marks it read. The others are left out of the history,
	// and read returns an error naming them.
	fetchSome func(ctx context.Context, keys []string) (marks []uint64, ok []bool, err error)
	// minReplicas, when above zero, keeps only the reads that many replicas
	// have acknowledged: with FENCE_REDIS_MIN_REPLICAS only acknowledged marks
	// are promised to survive a failover, and the primary also holds marks of
	// admissions whose WAIT failed (answered 503), which a failover may take
	// back. A read of those would count as a regression of the store.
	minReplicas int
	clock       clock
	keys        []string
	res         []string
	prefix      string

	mu  sync.Mutex
	ops []check.Op
}

func newReader(c redis.UniversalClient, cl clock, prefix string, resources int) *reader {
	rd := &reader{c: c, clock: cl, prefix: prefix}
	for i := range resources {
		rd.res = append(rd.res, resourceName(i))
		rd.keys = append(rd.keys, prefix+"res/"+resourceName(i))
	}
	return rd
}

// read takes one snapshot; a failed read records nothing.
func (rd *reader) read(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	call := rd.clock.now()
	var marks []uint64
	var ok []bool
	var err error
	if rd.fetchSome != nil {
		marks, ok, err = rd.fetchSome(ctx, rd.keys)
	} else if rd.fetch != nil {
		marks, err = rd.fetch(ctx, rd.keys)
	} else {
		var vals []any
		if vals, err = rd.mget(ctx); err == nil {
			marks, err = redisMarks(rd.keys, vals)
		}
	}
	ret := rd.clock.now()
	if err != nil && ok == nil {
		return err
	}
	ops := rd.readOps(marks, call, ret)
	if ok != nil {
		kept := ops[:0]
		for i, o := range ops { // readOps keeps the order of keys
			if ok[i] {
				kept = append(kept, o)
			}
		}
		ops = kept
	}
	rd.mu.Lock()
	rd.ops = append(rd.ops, ops...)
	rd.mu.Unlock()
	return err
}

// mget reads every mark. With minReplicas it also publishes on the same
// connection (PUBLISH is replicated and writes no key) and waits: the
// replicas that acknowledge the publication have every write the read saw.
func (rd *reader) mget(ctx context.Context) ([]any, error) {
	if rd.minReplicas <= 0 {
		return rd.c.MGet(ctx, rd.keys...).Result()
	}
	pipe := rd.c.Pipeline()
	vals := pipe.MGet(ctx, rd.keys...)
	pipe.Publish(ctx, "fenceproxy-faults-read", "")
	wait := redis.NewIntCmd(ctx, "wait", rd.minReplicas, 200)
	_ = pipe.Process(ctx, wait)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	if n := wait.Val(); n < int64(rd.minReplicas) {
		return nil, fmt.Errorf("read acknowledged by %d replicas, want %d", n, rd.minReplicas)
	}
	return vals.Val(), nil
}

// snapshot reads the marks from the server at addr on a connection of its
// own (a replica, or a copy of a crashed server's files), without recording
// them in the history.
func (rd *reader) snapshot(addr string) ([]check.Op, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true, PoolSize: 1, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	call := rd.clock.now()
	vals, err := c.MGet(ctx, rd.keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("MGET on %s: %w", addr, err)
	}
	ret := rd.clock.now()
	marks, err := redisMarks(rd.keys, vals)
	if err != nil {
		return nil, err
	}
	return rd.readOps(marks, call, ret), nil
}

// readOps turns one snapshot of the marks into read operations.
func (rd *reader) readOps(marks []uint64, call, ret int64) []check.Op {
	ops := make([]check.Op, 0, len(marks))
	for i, m := range marks {
		ops = append(ops, check.Op{Client: -1, Replica: -1, Resource: rd.res[i], Outcome: check.Read,
			Mark: m, Call: call, Return: ret})
	}
	return ops
}

// redisMarks parses MGET's values (a missing key is nil: mark 0): the
// token of each mark, which the suite's load routes store alone.
func redisMarks(keys []string, vals []any) ([]uint64, error) {
	marks := make([]uint64, len(vals))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			p, err := parseRedisMark(s)
			if err != nil {
				return nil, fmt.Errorf("mark %s: %w", keys[i], err)
			}
			marks[i] = p.Token
		}
	}
	return marks, nil
}

// parseRedisMark parses a mark as Redis stores it, "t" or "t:s" in
// canonical decimal, independently of the store's code.
func parseRedisMark(s string) (check.Pair, error) {
	num := func(x string) (uint64, bool) {
		if x == "" || (len(x) > 1 && x[0] == '0') || strings.Trim(x, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil
	}
	t, sq, hasSeq := strings.Cut(s, ":")
	var p check.Pair
	var ok bool
	if p.Token, ok = num(t); !ok {
		return p, fmt.Errorf("%q is not a mark", s)
	}
	if hasSeq {
		if p.Seq, ok = num(sq); !ok {
			return p, fmt.Errorf("%q is not a mark", s)
		}
		p.HasSeq = true
	}
	return p, nil
}

// run reads every interval until ctx is done.
func (rd *reader) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = rd.read(300 * time.Millisecond)
		}
	}
}

func (rd *reader) history() []check.Op {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return append([]check.Op(nil), rd.ops...)
}
