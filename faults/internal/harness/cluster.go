package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// The redisCluster topology: three masters, each with one replica, every
// node on AOF always, FENCE_REDIS_CLUSTER_ADDRS listing all six and
// FENCE_REDIS_MIN_REPLICAS=1: on a Cluster the admission's WAIT runs on
// the shard that owns the mark, so an acknowledged mark is on that shard's
// replica when the replica is promoted.

const (
	clusterMasters = 3
	clusterNodes   = 6
	// clusterNodeTimeout is how long a silent master takes to be judged
	// failed; its replica is promoted about a second after that.
	clusterNodeTimeout = time.Second
)

// clusterNodeArgs: a cluster node with the suite's persistence. A shard
// whose master is down does not stop the others
// (cluster-require-full-coverage no): with the default, every node refuses
// every command from the moment the master is judged failed until its
// replica is promoted, and the scenario could not show the other shards
// serving through the failover (the "fullcoverage" control runs that).
func (e *env) clusterNodeArgs() ([]string, error) {
	bus, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	coverage := "no"
	if e.opts.Break == "fullcoverage" {
		coverage = "yes"
	}
	args := append(e.aofArgs(), "--repl-diskless-sync-delay", "0", "--cluster-require-full-coverage", coverage)
	return append(args, redistest.ClusterNodeArgs(bus, clusterNodeTimeout)...), nil
}

// startCluster starts the six nodes, joins them with redis-cli (the first
// three masters, the others their replicas), waits until every node sees
// the whole cluster and every master counts its replica's
// acknowledgements, and points the proxies and the mark reader at it.
func (e *env) startCluster(proxyEnv map[string]string) error {
	for i := range clusterNodes {
		args, err := e.clusterNodeArgs()
		if err != nil {
			return err
		}
		n, err := e.h.startRedis(fmt.Sprintf("redis-%d", i), args...)
		if err != nil {
			return err
		}
		e.nodes = append(e.nodes, n)
	}
	addrs := make([]string, len(e.nodes))
	for i, n := range e.nodes {
		addrs[i] = n.Addr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := redistest.CreateCluster(ctx, addrs, 1); err != nil {
		return err
	}
	for _, n := range e.nodes {
		if err := waitFor(n.Proc, 20*time.Second, n.Name+" sees the whole cluster", func() error {
			return redistest.ClusterReady(n.Addr(), clusterNodes)
		}); err != nil {
			return err
		}
	}
	for _, n := range e.nodes[:clusterMasters] {
		if err := waitFor(n.Proc, 15*time.Second, n.Name+" acknowledged by its replica", func() error {
			return redistest.WaitAcks(n.Addr())
		}); err != nil {
			return err
		}
	}
	proxyEnv["FENCE_REDIS_CLUSTER_ADDRS"] = strings.Join(addrs, ",")
	proxyEnv["FENCE_REDIS_MIN_REPLICAS"] = "1"
	proxyEnv["FENCE_REDIS_WAIT_TIMEOUT"] = "200ms"
	e.rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true, PoolSize: 2, DisableIdentity: true})
	return nil
}

// clusterFetch reads the marks shard by shard from each key's master: per
// master one pipeline of GETs and, with minReplicas, a throwaway write and
// WAIT on the same connection, so that a read keeps only marks the shard's
// replica has (what FENCE_REDIS_MIN_REPLICAS promises a failover keeps).
// PUBLISH, which the reader uses elsewhere, goes over the cluster bus on a
// Cluster, not down the replication stream, so it would give WAIT nothing
// to wait for. A shard that does not answer (its master killed, its
// replica not yet promoted) leaves its marks unread; the others are read.
func clusterFetch(cc *redis.ClusterClient, minReplicas int) func(ctx context.Context, keys []string) ([]uint64, []bool, error) {
	return func(ctx context.Context, keys []string) ([]uint64, []bool, error) {
		marks, ok := make([]uint64, len(keys)), make([]bool, len(keys))
		groups := map[*redis.Client][]int{}
		var order []*redis.Client
		var errs []error
		for i, k := range keys {
			m, err := cc.MasterForKey(ctx, k)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
				continue
			}
			if _, seen := groups[m]; !seen {
				order = append(order, m)
			}
			groups[m] = append(groups[m], i)
		}
		for _, m := range order {
			idx := groups[m]
			if err := readShard(ctx, m, keys, idx, minReplicas, marks); err != nil {
				errs = append(errs, err)
				continue
			}
			for _, i := range idx {
				ok[i] = true
			}
		}
		if len(errs) > 0 {
			// The slots moved (a promotion) or a master died: ask the
			// cluster again before the next read.
			cc.ReloadState(ctx)
		}
		return marks, ok, errors.Join(errs...)
	}
}

// readShard reads the marks keys[idx] from their master m into marks.
func readShard(ctx context.Context, m *redis.Client, keys []string, idx []int, minReplicas int, marks []uint64) error {
	pipe := m.Pipeline()
	gets := make([]*redis.StringCmd, len(idx))
	for j, i := range idx {
		gets[j] = pipe.Get(ctx, keys[i])
	}
	var wait *redis.IntCmd
	if minReplicas > 0 {
		// A key outside the store's prefix, in the first mark's slot (its
		// hash tag is that key), so that this master owns it.
		pipe.Set(ctx, "faults-read{"+keys[idx[0]]+"}", "1", 10*time.Second)
		wait = redis.NewIntCmd(ctx, "wait", minReplicas, 200)
		_ = pipe.Process(ctx, wait)
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	for j, g := range gets {
		v, err := g.Result()
		switch {
		case errors.Is(err, redis.Nil):
			marks[idx[j]] = 0
		case err != nil:
			return fmt.Errorf("GET %s on %s: %w", keys[idx[j]], m.Options().Addr, err)
		default:
			p, err := parseRedisMark(v)
			if err != nil {
				return fmt.Errorf("mark %s: %w", keys[idx[j]], err)
			}
			marks[idx[j]] = p.Token
		}
	}
	if wait != nil {
		if err := wait.Err(); err != nil {
			return fmt.Errorf("WAIT on %s: %w", m.Options().Addr, err)
		}
		if n := wait.Val(); n < int64(minReplicas) {
			return fmt.Errorf("read on %s acknowledged by %d replicas, want %d", m.Options().Addr, n, minReplicas)
		}
	}
	return nil
}

// replicaSnapshot reads the marks of resources from the cluster replica
// at addr (READONLY: a replica otherwise redirects every read to its
// master), on a connection of its own, without recording them: what its
// promotion will serve.
func (rd *reader) replicaSnapshot(addr string, resources []string) ([]check.Op, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true, PoolSize: 1, DisableIdentity: true,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var keys []string
	var idx []int
	for _, r := range resources {
		i := slices.Index(rd.res, r)
		if i < 0 {
			return nil, fmt.Errorf("unknown resource %s", r)
		}
		keys = append(keys, rd.keys[i])
		idx = append(idx, len(idx))
	}
	call := rd.clock.now()
	marks := make([]uint64, len(keys))
	if err := readShard(ctx, c, keys, idx, 0, marks); err != nil {
		return nil, err
	}
	ret := rd.clock.now()
	ops := make([]check.Op, len(keys))
	for i, m := range marks {
		ops[i] = check.Op{Client: -1, Replica: -1, Resource: resources[i], Outcome: check.Read, Mark: m, Call: call, Return: ret}
	}
	return ops, nil
}

// clusterShard is one master, its replica and the load's resources whose
// marks live in its slots.
type clusterShard struct {
	master, replica *Redis
	resources       []string
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, masterID string
	master, failed     bool
	slots              [][2]int // inclusive ranges
}

// parseClusterNodes parses CLUSTER NODES: "<id> <ip:port@bus[,host]>
// <flags> <master id or -> <ping> <pong> <epoch> <link> <slot ranges>";
// slots being imported or migrated ("[...]") are left out.
func parseClusterNodes(text string) ([]clusterNode, error) {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		n := clusterNode{id: f[0], addr: addr, masterID: f[3],
			master: slices.Contains(flags, "master"),
			failed: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?")}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a > b {
				return nil, fmt.Errorf("CLUSTER NODES slot range %q", s)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// shards groups the load's resources by the master that owns their marks'
// slots, as the node at via sees the cluster, and pairs each master with
// its replica. Every master must be up and have one replica up.
func (e *env) shards(via *Redis) ([]clusterShard, error) {
	r, err := redistest.Do(via.Addr(), nil, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	text, _ := r.(string)
	nodes, err := parseClusterNodes(text)
	if err != nil {
		return nil, err
	}
	byAddr := map[string]*Redis{}
	for _, n := range e.nodes {
		byAddr[n.Addr()] = n
	}
	var out []clusterShard
	var masters []clusterNode
	for _, m := range nodes {
		if !m.master || len(m.slots) == 0 {
			continue
		}
		if m.failed || byAddr[m.addr] == nil {
			return nil, fmt.Errorf("master %s is failed or unknown", m.addr)
		}
		sh := clusterShard{master: byAddr[m.addr]}
		for _, rep := range nodes {
			if rep.masterID == m.id && !rep.failed && byAddr[rep.addr] != nil {
				sh.replica = byAddr[rep.addr]
			}
		}
		if sh.replica == nil {
			return nil, fmt.Errorf("master %s has no replica up", m.addr)
		}
		out = append(out, sh)
		masters = append(masters, m)
	}
	for i := range e.p.resources {
		res := resourceName(i)
		r, err := redistest.Do(via.Addr(), nil, "CLUSTER", "KEYSLOT", markKey(res))
		if err != nil {
			return nil, err
		}
		slot, _ := r.(int64)
		for j, m := range masters {
			if slices.ContainsFunc(m.slots, func(s [2]int) bool { return int(slot) >= s[0] && int(slot) <= s[1] }) {
				out[j].resources = append(out[j].resources, res)
			}
		}
	}
	return out, nil
}

// markKey is the key fenceproxy keeps a load resource's mark under (the
// default prefix; no hash tag, so the slot is the whole key's).
func markKey(resource string) string { return "fence:res/" + resource }

// rejoin restarts node on its files and waits until it serves as
// master's replica: linked and in sync, known to the cluster, and master
// acknowledging writes again (WAIT, which the proxies run).
func rejoin(node, master *Redis) error {
	if err := node.Restart(); err != nil {
		return err
	}
	return waitFor(node.Proc, 30*time.Second, node.Name+" rejoins as "+master.Name+"'s replica", func() error {
		info, err := redistest.Info(node.Addr(), nil, "replication")
		if err != nil {
			return err
		}
		if info["role"] != "slave" || info["master_link_status"] != "up" || info["master_port"] != strconv.Itoa(master.Port) {
			return fmt.Errorf("role %s link %s master_port %s", info["role"], info["master_link_status"], info["master_port"])
		}
		if err := redistest.ClusterReady(node.Addr(), clusterNodes); err != nil {
			return err
		}
		return redistest.WaitAcks(master.Addr())
	})
}

// nextVictim waits for round's turn (pause), then picks the shard to kill
// as the cluster is now (victimShard), and the other shards' resources.
func (e *env) nextVictim(ctx context.Context, round int) (clusterShard, []string, error) {
	if err := e.pause(ctx, round); err != nil {
		return clusterShard{}, nil, err
	}
	shards, err := e.shards(e.liveNode())
	if err != nil {
		return clusterShard{}, nil, err
	}
	return victimShard(shards)
}

// victimShard picks the shard to kill: the one holding the most of the
// load's resources, provided the others hold some too (or the scenario
// could not show them serving).
func victimShard(shards []clusterShard) (clusterShard, []string, error) {
	if len(shards) == 0 {
		return clusterShard{}, nil, errors.New("no shard")
	}
	v := 0
	for i, s := range shards {
		if len(s.resources) > len(shards[v].resources) {
			v = i
		}
	}
	var others []string
	for i, s := range shards {
		if i != v {
			others = append(others, s.resources...)
		}
	}
	if len(shards[v].resources) == 0 || len(others) == 0 {
		return clusterShard{}, nil, fmt.Errorf("the load's resources do not spread over the shards (%d on the fullest, %d on the others)",
			len(shards[v].resources), len(others))
	}
	return shards[v], others, nil
}

// noteDropped adds releases_dropped: fenceproxy_drain_releases_dropped_total
// summed over the replicas (releases of the barrier dropped unacknowledged
// because too many were owed at once; each entry then holds its resource's
// newer requests until their waiters give it up: drain_expired,
// drain_timeout). Reported, not judged.
func (e *env) noteDropped() error {
	var sum float64
	for _, r := range e.proxies {
		v, err := r.metric("fenceproxy_drain_releases_dropped_total")
		if err != nil {
			return err
		}
		sum += v
	}
	e.note("releases_dropped=%.0f", sum)
	return nil
}
