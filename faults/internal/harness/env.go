package harness

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// params are the sizes and durations of a mode.
type params struct {
	workers, resources int
	loadWorkers        int
	warmup, cooldown   time.Duration
	gap                time.Duration // between two injections of one scenario
	rounds             int           // injections per scenario
	loadFor            time.Duration // the load scenario's steady phase
	checkTimeout       time.Duration // bound on porcupine, per scenario
	storeTimeout       time.Duration // FENCE_STORE_TIMEOUT
	// upstreamTimeout is FENCE_UPSTREAM_TIMEOUT, unless the scenario sets
	// its own: how long a killed or frozen replica's requests hold the
	// drain barrier for the others.
	upstreamTimeout time.Duration
	slowRounds      int           // slow-body: stalled writes of each size
	slowFor         time.Duration // slow-upstream: how long the load runs
	wakeTrials      int           // drain-wake: trials
	orderTrials     int           // locale, clock-step: trials or rounds
}

var modes = map[string]params{
	"short": {workers: 8, resources: 8, loadWorkers: 16, warmup: 2 * time.Second, cooldown: 3 * time.Second,
		gap: 2 * time.Second, rounds: 1, loadFor: 10 * time.Second, checkTimeout: 30 * time.Second,
		storeTimeout: 500 * time.Millisecond, upstreamTimeout: 2 * time.Second, slowRounds: 1, slowFor: 6 * time.Second,
		wakeTrials: 50, orderTrials: 10},
	// smoke is for the suite's own tests (the negative controls): one short
	// injection, a few seconds of load.
	"smoke": {workers: 8, resources: 8, loadWorkers: 8, warmup: time.Second, cooldown: 2 * time.Second,
		gap: time.Second, rounds: 1, loadFor: 3 * time.Second, checkTimeout: 20 * time.Second,
		storeTimeout: 500 * time.Millisecond, upstreamTimeout: 2 * time.Second, slowRounds: 1, slowFor: 3 * time.Second,
		wakeTrials: 10, orderTrials: 4},
	"long": {workers: 12, resources: 12, loadWorkers: 24, warmup: 3 * time.Second, cooldown: 5 * time.Second,
		gap: 4 * time.Second, rounds: 5, loadFor: 120 * time.Second, checkTimeout: 180 * time.Second,
		storeTimeout: 500 * time.Millisecond, upstreamTimeout: 2 * time.Second, slowRounds: 3, slowFor: 30 * time.Second,
		wakeTrials: 200, orderTrials: 40},
}

type topology int

const (
	single         topology = iota // one redis-server, AOF always
	sentinelWait                   // master + 1 replica + 3 sentinels, MIN_REPLICAS=1
	sentinelNoWait                 // the same, MIN_REPLICAS=0, replication through a lagging link
	sentinelTwo                    // master + 2 replicas + 3 sentinels, MIN_REPLICAS=1 (failover-barrier)
	etcdCluster                    // three etcd members (etcdtest), FENCE_STORE=etcd
	boltFiles                      // each replica on a bolt file of its own (the default store)
	redisCluster                   // 3 masters, each with 1 replica (Redis Cluster), MIN_REPLICAS=1
)

// scenario is one fault (or load) pattern.
type scenario struct {
	name     string
	measure  bool // a configuration documented as unsafe: measured, never failed
	topo     topology
	viaToxic bool // the proxies reach Redis through toxiproxy
	workers  int  // 0: params.workers
	noLoad   bool // no load workers: the scenario sends its own requests
	// drainOff runs the proxies with FENCE_DRAIN=off: the order figures
	// are measured (a measure= line), not failed; the safety figures
	// still are.
	drainOff bool
	// upstreamTimeout, when set, is the proxies' FENCE_UPSTREAM_TIMEOUT
	// instead of params.upstreamTimeout.
	upstreamTimeout time.Duration
	// inject runs while the load runs, and returns when the scenario's
	// time is up (after its cooldown).
	inject func(ctx context.Context, e *env) error
	// expect returns failed expectations: the fault had no visible effect,
	// the other replica did not keep serving...
	expect func(e *env, ops []check.Op) []string
	// fields returns extra key=value fields for the output line.
	fields func(e *env, ops []check.Op, r *check.Report) []string
	// measures returns measure= lines printed after the scenario's line.
	measures func(e *env, ops []check.Op, r *check.Report) []string
	// judge runs the scenario's own checks once the history is checked:
	// it may add Violations, Order and Problems to the result.
	judge func(e *env, ops []check.Op, res *Result)
	// hold, when set, makes the upstream hold some requests (a slow
	// upstream); it is installed before the load starts.
	hold func() time.Duration
	// redisArgs, when set, replace the persistence settings of the single
	// Redis (aofArgs).
	redisArgs []string
	// healed: scrape fenceproxy_mark_regressions_total at the end (the
	// healed= field).
	healed bool
	// redisEnv, when set, returns environment variables for the
	// redis-server processes (a locale, the clock shim); it runs before
	// they start.
	redisEnv func(e *env) ([]string, error)
	// noReader: no mark reader runs (herd counts the store's commands).
	noReader bool
	// cold: in a store-loss scenario, replica 1 is restarted once a warm
	// replica has met the loss (lagging-failover).
	cold bool
	// loadCfg, when set, adjusts the load's configuration.
	loadCfg func(e *env, c *loadConfig)
	// replicas is how many fenceproxy replicas setup starts (0: two).
	replicas int
	// downAfter is the sentinels' down-after-milliseconds (0: one second):
	// how long a silent master goes before it is judged failed.
	downAfter time.Duration
	// replCut, on sentinelTwo, puts the second replica behind a toxiproxy
	// link too, and failoverBarrier cuts both replicas' links this long
	// before the master's kill: what the master acknowledged meanwhile (a
	// release) reaches neither.
	replCut time.Duration
}

// window is an interval in which a fault was active; replica is the proxy
// replica it hit, -1 for all.
type window struct {
	start, end int64
	replica    int
}

// env is a running scenario: its processes, load and record.
type env struct {
	h     *Harness
	p     params
	opts  Options
	sc    *scenario
	clock clock

	up       *Upstream
	toxSrv   *toxiproxy.ApiServer
	toxics   []*Toxic
	link     *Toxic // proxies -> Redis (viaToxic)
	replLink *Toxic // replica -> first master (sentinel topologies)
	// replLink2 is sentinelTwo's second replica's link, with replCut.
	replLink2 *Toxic
	master    *Redis
	replica   *Redis
	replica2  *Redis // sentinelTwo's second replica
	sents     *sentinelGroup
	nodes     []*Redis // redisCluster's nodes: the first three started as masters
	proxies   []*Replica
	rc        redis.UniversalClient // the reader's client (Redis topologies)
	etcd      *etcdtest.Cluster     // the etcd topology's members
	ec        *clientv3.Client      // the reader's client of every member (etcd)
	// etcdKills are the etcd-leader-kill rounds.
	etcdKills []etcdKill
	rd        *reader
	ld        *load

	mu         sync.Mutex
	windows    []window
	recovered  int64 // end of the last fault; 0 if none
	injections int
	// checkpoints pair a moment before a fault (kill, failover) with the
	// marks read right after recovery, to count lost marks.
	checkpoints []checkpoint
	notes       []string    // extra key=value fields
	steady      [2]int64    // the load scenario's steady phase
	mem         [2][]Memory // the replicas' memory at its start and end
	// extra are operations of the scenario's own clients (slow-body),
	// checked with the load's; slow its stalled writes.
	extra []check.Op
	slow  []slowRound
	// wake are the drain-wake trials; drain the replicas' drain metrics
	// at the start and end of the load's steady phase.
	wake  []wakeTrial
	drain [2]drainSample
	// probes are the expiry probes of proxy-kill and proxy-pause;
	// probeProblems and probeViolations what they found wrong.
	probes                         []expiryProbe
	probeProblems, probeViolations []string
	// loss is what a store-loss scenario recorded; healed the replicas'
	// fenceproxy_mark_regressions_total at the end (-1: not scraped).
	loss   *storeLoss
	healed float64
	// trials are the locale scenario's; collates whether Redis compared
	// as en_US.UTF-8 does.
	trials   []wakeTrial
	collates bool
	// clockShim steps the store's clock (clock-step); clockRounds are its
	// forward rounds.
	clockShim   *redistest.ClockShim
	clockRounds []clockRound
	// herd are the herd scenario's phases.
	herd []herdPhase
	// promoted is when failover-barrier's sentinels had promoted a replica.
	promoted int64
	// wentBack is when a restore scenario's store went back (the kill
	// before the restore or the promotion).
	wentBack int64
	// probe is a restore scenario's stale probe (restore.go).
	probe *restoreProbe
	// bolt are bolt-restore's variants (boltrestore.go).
	bolt []*boltVariant
	// clusterKills are cluster-failover's rounds (cluster.go).
	clusterKills []clusterKill
	// shardKill is cluster-shard-kill's (clustershardkill.go).
	shardKill *shardKill
}

type checkpoint struct {
	before int64
	reads  []check.Op
}

func (e *env) now() int64 { return e.clock.now() }

func (e *env) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (e *env) fault(start int64, replica int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	end := e.now()
	e.windows = append(e.windows, window{start: start, end: end, replica: replica})
	e.recovered = end
	e.injections++
}

func (e *env) note(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.opts.Log, "faults: %s: %s\n", e.sc.name, fmt.Sprintf(format, args...))
}

// aofArgs are the persistence settings the docs call safe across a crash,
// unless the "nopersist" control asks for none.
func (e *env) aofArgs() []string {
	if e.opts.Break == "nopersist" {
		return []string{"--appendonly", "no"}
	}
	return []string{"--appendonly", "yes", "--appendfsync", "always"}
}

// setup starts the topology, the upstream and two fenceproxy replicas.
func (e *env) setup() error {
	up, err := startUpstream(e.clock)
	if err != nil {
		return err
	}
	e.up = up
	e.toxSrv = newToxicServer()
	p := e.p
	if e.sc.redisEnv != nil {
		if e.h.redisEnv, err = e.sc.redisEnv(e); err != nil {
			return err
		}
	}
	proxyEnv := e.proxyEnv()
	clientOpts := func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
			PoolSize: 2, DisableIdentity: true}
	}
	switch e.sc.topo {
	case single:
		args := e.aofArgs()
		if e.sc.redisArgs != nil {
			args = e.sc.redisArgs
		}
		if e.master, err = e.h.startRedis("redis", args...); err != nil {
			return err
		}
		addr := e.master.Addr()
		if e.sc.viaToxic {
			if e.link, err = e.newToxic("redis", addr); err != nil {
				return err
			}
			addr = e.link.Addr()
		}
		proxyEnv["FENCE_REDIS_URL"] = "redis://" + addr + "/0"
		e.rc = redis.NewClient(clientOpts(e.master.Addr()))
	case sentinelWait, sentinelNoWait, sentinelTwo:
		if e.master, err = e.h.startRedis("redis-a", e.aofArgs()...); err != nil {
			return err
		}
		// The replica reaches the master through toxiproxy, so that the
		// kill can also cut the replication stream in flight (a host crash)
		// and, without acknowledgement, the stream can lag.
		if e.replLink, err = e.newToxic("replication", e.master.Addr()); err != nil {
			return err
		}
		via := e.replLink.Addr()
		if e.replica, err = e.h.startReplica("redis-b", e.master, via, e.aofArgs()...); err != nil {
			return err
		}
		if e.sc.topo == sentinelTwo {
			// A second replica, straight to the master (through a link of
			// its own when the scenario cuts both): after a failover the
			// promoted one still has a replica to acknowledge marks.
			via2 := e.master.Addr()
			if e.sc.replCut > 0 {
				if e.replLink2, err = e.newToxic("replication-2", e.master.Addr()); err != nil {
					return err
				}
				via2 = e.replLink2.Addr()
			}
			if e.replica2, err = e.h.startReplica("redis-c", e.master, via2, e.aofArgs()...); err != nil {
				return err
			}
			for _, r := range []*Redis{e.replica, e.replica2} {
				_, _ = redistest.Do(r.Addr(), nil, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
			}
		}
		downAfter := time.Second
		if e.sc.downAfter > 0 {
			downAfter = e.sc.downAfter
		}
		if e.sents, err = e.h.startSentinels(3, "mymaster", e.master, downAfter, 3*time.Second); err != nil {
			return err
		}
		proxyEnv["FENCE_REDIS_SENTINEL_ADDRS"] = strings.Join(e.sents.addrs(), ",")
		proxyEnv["FENCE_REDIS_MASTER_NAME"] = "mymaster"
		if e.sc.topo == sentinelWait || e.sc.topo == sentinelTwo {
			proxyEnv["FENCE_REDIS_MIN_REPLICAS"] = "1"
			proxyEnv["FENCE_REDIS_WAIT_TIMEOUT"] = "200ms"
		}
		e.rc = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster",
			SentinelAddrs: e.sents.addrs(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
			PoolSize: 2, DisableIdentity: true})
	case etcdCluster:
		if err := e.startEtcd(proxyEnv); err != nil {
			return err
		}
	case redisCluster:
		if err := e.startCluster(proxyEnv); err != nil {
			return err
		}
	}
	if e.opts.Break == "memory" {
		// Each replica keeps its own marks: cross-replica fencing is gone.
		proxyEnv = e.proxyEnv()
		proxyEnv["FENCE_STORE"] = "memory"
		if e.rc != nil {
			_ = e.rc.Close()
			e.rc = nil
		}
		if e.ec != nil {
			_ = e.ec.Close()
			e.ec = nil
		}
	}
	n := 2
	if e.sc.replicas > 0 {
		n = e.sc.replicas
	}
	for i := range n {
		r, err := e.h.startProxy(i, e.up.URL(), proxyEnv, true)
		if err != nil {
			return err
		}
		e.proxies = append(e.proxies, r)
	}
	if e.rc != nil && !e.sc.noReader {
		e.rd = newReader(e.rc, e.clock, "fence:", p.resources)
		if e.sc.topo == sentinelWait || e.sc.topo == sentinelTwo {
			e.rd.minReplicas = 1
		}
		if cc, ok := e.rc.(*redis.ClusterClient); ok {
			e.rd.fetchSome = clusterFetch(cc, 1)
		}
	}
	if e.ec != nil {
		e.rd = newReader(nil, e.clock, "fence:", p.resources)
		e.rd.fetch = etcdFetch(e.ec)
	}
	return nil
}

// proxyEnv is the environment every replica gets: the store timeout, the
// upstream deadline and the drain barrier (on unless the scenario measures
// it off, or the "nodrain" control breaks it); under a control that breaks
// the proxy itself (testBreaks), the variable that names it.
func (e *env) proxyEnv() map[string]string {
	up := e.upstreamTimeout()
	drain := "on"
	if e.drainOff() {
		drain = "off"
	}
	env := map[string]string{
		"FENCE_STORE_TIMEOUT":    e.p.storeTimeout.String(),
		"FENCE_UPSTREAM_TIMEOUT": up.String(),
		"FENCE_DRAIN":            drain,
	}
	if testBreaks[e.opts.Break] {
		env[testBreakVar] = e.opts.Break
	}
	return env
}

// upstreamTimeout is the proxies' FENCE_UPSTREAM_TIMEOUT.
func (e *env) upstreamTimeout() time.Duration {
	if e.opts.Break == "shortdeadline" {
		return shortDeadline
	}
	if e.sc.upstreamTimeout > 0 {
		return e.sc.upstreamTimeout
	}
	return e.p.upstreamTimeout
}

// drainOff reports whether the proxies run without the drain barrier.
func (e *env) drainOff() bool { return e.sc.drainOff || e.opts.Break == "nodrain" }

func (e *env) newToxic(name, upstream string) (*Toxic, error) {
	t, err := startToxic(e.toxSrv, name, upstream)
	if err != nil {
		return nil, err
	}
	e.toxics = append(e.toxics, t)
	return t, nil
}

func (e *env) teardown() {
	e.h.procs.stopAll()
	if e.etcd != nil {
		e.etcd.Stop()
	}
	for _, t := range e.toxics {
		t.Close()
	}
	if e.rc != nil {
		_ = e.rc.Close()
	}
	if e.ec != nil {
		_ = e.ec.Close()
	}
	if e.up != nil {
		e.up.close()
	}
}

// readNow takes one snapshot of the marks, retrying for up to timeout; it
// returns the read operations it recorded.
func (e *env) readNow(timeout time.Duration) ([]check.Op, error) {
	if e.rd == nil {
		return nil, nil
	}
	deadline := time.Now().Add(timeout)
	for {
		n := len(e.rd.history())
		err := e.rd.read(time.Second)
		if err == nil {
			return e.rd.history()[n:], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reading the marks from the store: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkpoint records marks read from what the store will hold after the
// fault (the crashed server's files, the replica about to be promoted)
// against the moment the fault began, for lostMarks.
func (e *env) checkpoint(before int64, reads []check.Op) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.checkpoints = append(e.checkpoints, checkpoint{before: before, reads: reads})
}

// checkpointLoss is the checkpoint of a store-loss scenario: reads against
// lossAt.
func (e *env) checkpointLoss(reads []check.Op) { e.checkpoint(e.lossAt(), reads) }

// lostMarks counts, over every checkpoint, the resources whose mark is
// below the greatest token admitted (answered 2xx) before the fault began,
// and the sum of the differences: marks the store lost.
func (e *env) lostMarks(ops []check.Op) (resources int, tokens uint64) {
	for _, cp := range e.checkpoints {
		n, tok := marksBelow(ops, cp.before, cp.reads)
		resources += n
		tokens += tok
	}
	return resources, tokens
}

// marksBelow counts the reads whose mark is below the greatest token of
// their resource admitted (answered 2xx) before t, and the sum of the
// differences.
func marksBelow(ops []check.Op, t int64, reads []check.Op) (resources int, tokens uint64) {
	hi := map[string]uint64{}
	for i := range ops {
		if ops[i].Outcome == check.Admitted && ops[i].Return < t {
			hi[ops[i].Resource] = max(hi[ops[i].Resource], ops[i].Token)
		}
	}
	for _, r := range reads {
		if r.Mark < hi[r.Resource] {
			resources++
			tokens += hi[r.Resource] - r.Mark
		}
	}
	return resources, tokens
}

// lossAt is the instant whose admitted tokens the store must still hold
// after a store-loss scenario's fault: when a restore scenario's store went
// back (the kill after the backup was taken, or before the promotion of the
// lagging replica), else when the fault began. A restore takes back exactly
// what was admitted between its backup and that instant: the backup holds
// everything admitted before it, so counting against the start of the
// scenario's fault (before the backup) would find nothing taken back.
func (e *env) lossAt() int64 {
	if e.wentBack > 0 {
		return e.wentBack
	}
	if e.loss != nil {
		return e.loss.start
	}
	return 0
}

// inWindow reports whether t falls in a fault window hitting replica (or
// all replicas).
func (e *env) inWindow(t int64, replica int) bool {
	for _, w := range e.windows {
		if t >= w.start && t <= w.end && (w.replica < 0 || w.replica == replica) {
			return true
		}
	}
	return false
}

// count returns how many ops satisfy f.
func count(ops []check.Op, f func(*check.Op) bool) int {
	n := 0
	for i := range ops {
		if f(&ops[i]) {
			n++
		}
	}
	return n
}

// latencies returns the p50 and p99 of the admitted writes' durations.
func latencies(ops []check.Op) (time.Duration, time.Duration) {
	var d []int64
	for i := range ops {
		if ops[i].Outcome == check.Admitted {
			d = append(d, ops[i].Return-ops[i].Call)
		}
	}
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	q := func(p float64) time.Duration {
		return time.Duration(d[int(math.Min(float64(len(d)-1), p*float64(len(d))))])
	}
	return q(0.50), q(0.99)
}

// addOps adds the scenario's own operations that were sent (those with a
// call time: a trial stopped early leaves the rest unsent) to the history
// the checkers read beside the load's (e.extra).
func (e *env) addOps(ops ...check.Op) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, op := range ops {
		if op.Call != 0 {
			e.extra = append(e.extra, op)
		}
	}
}

// heldViolations: a newer request of a trial that reached the upstream
// while the older one was held there is a violation; a trial that could
// not run is a problem.
func heldViolations(trials []wakeTrial, res *Result) {
	for _, t := range trials {
		if t.problem != "" {
			res.Problems = append(res.Problems, t.problem)
		}
		if t.early {
			res.Violations = append(res.Violations, fmt.Sprintf("%s: the newer write (%v, replica %d) reached the upstream while the older one (%v, replica %d) was held there",
				t.nw.Resource, t.nw.Req(), t.nw.Replica, t.old.Req(), t.old.Replica))
		}
	}
}
