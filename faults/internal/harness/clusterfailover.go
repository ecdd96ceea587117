package harness

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// clusterKill is one round of cluster-failover.
type clusterKill struct {
	victim, others            []string // the killed shard's resources, the other shards'
	start, promoted, rejoined int64
}

// clusterFailover: under load, SIGKILL the master of the shard that holds
// the most resources; the cluster promotes its replica (polled every 20
// ms: promoted_ms); the killed node is restarted on its files and rejoins
// as the new master's replica (rejoined_ms: in sync and acknowledging).
// The marks of the killed shard are read from the replica right after the
// kill, before anything can write to it: what the promotion serves, checked
// against every token admitted before the kill (lost_marks). Long mode
// repeats on the shard that holds the most resources at the time.
func clusterFailover(ctx context.Context, e *env) error {
	for i := range e.p.rounds {
		sh, others, err := e.nextVictim(ctx, i)
		if err != nil {
			return err
		}
		old, next := sh.master, sh.replica
		k := clusterKill{victim: sh.resources, others: others, start: e.now()}
		pid := old.Pid()
		if err := old.Kill(); err != nil {
			return err
		}
		if e.rd != nil {
			reads, err := e.rd.replicaSnapshot(next.Addr(), sh.resources)
			if err != nil {
				return err
			}
			e.checkpoint(k.start, reads)
		}
		err = waitFor(next.Proc, 30*time.Second, next.Name+" promoted", func() error {
			info, err := redistest.Info(next.Addr(), nil, "replication")
			if err != nil {
				return err
			}
			if info["role"] != "master" {
				return fmt.Errorf("role %s", info["role"])
			}
			return redistest.ClusterReady(next.Addr(), clusterNodes)
		})
		if err != nil {
			return err
		}
		k.promoted = e.now()
		e.promoted = k.promoted
		if err := rejoin(old, next); err != nil {
			return err
		}
		k.rejoined = e.now()
		e.mu.Lock()
		e.clusterKills = append(e.clusterKills, k)
		e.mu.Unlock()
		e.fault(k.start, -1)
		e.logf("SIGKILL master %s pid %d (resources %s); %s promoted after %v; %s rejoined as its replica after %v",
			old.Addr(), pid, strings.Join(sh.resources, ","), next.Addr(), dur(k.promoted-k.start), old.Addr(), dur(k.rejoined-k.start))
	}
	if err := e.sleep(ctx, e.p.cooldown); err != nil {
		return err
	}
	return e.noteDropped()
}

// liveNode is a node to ask about the cluster between rounds: the first
// one, which runs then because every round restarts the node it killed
// before the next begins.
func (e *env) liveNode() *Redis { return e.nodes[0] }

// expectCluster: the kill showed (503s or failed requests for the killed
// shard's resources while it lasted) and the other shards kept admitting
// through it (requests for their resources sent and answered 2xx inside
// the window).
func expectCluster(e *env, ops []check.Op) []string {
	if len(e.clusterKills) == 0 {
		return []string{"no shard was killed"}
	}
	var out []string
	for i, k := range e.clusterKills {
		hit, served, _ := clusterFigures(k, ops)
		if hit == 0 {
			out = append(out, fmt.Sprintf("round %d: the kill had no visible effect on its shard's resources (%s)", i+1, strings.Join(k.victim, ",")))
		}
		if served == 0 {
			out = append(out, fmt.Sprintf("round %d: the other shards admitted nothing while the shard failed over", i+1))
		}
	}
	return out
}

// judgeCluster: no request for the other shards' resources answered 503
// or failed while a shard failed over (other_shards_unavailable): one
// master's failover must not reach the others' requests.
func judgeCluster(e *env, ops []check.Op, res *Result) {
	for i, k := range e.clusterKills {
		if _, _, otherDown := clusterFigures(k, ops); otherDown > 0 {
			res.Violations = append(res.Violations, otherShardsDown(fmt.Sprintf("cluster-failover round %d", i+1), otherDown))
		}
	}
}

// otherShardsDown is the violation of a run whose other shards refused n
// requests while one was down.
func otherShardsDown(what string, n int) string {
	return fmt.Sprintf("%s: %d requests for the other shards' resources answered 503 or failed while one shard was down", what, n)
}

// clusterFigures: of one kill, the requests for the killed shard's
// resources answered 503 or failed while it lasted (hit), those for the
// other shards' resources both sent and answered 2xx while it lasted
// (served), and those answered 503 or failed then (otherDown, a violation:
// a batch that waits on the dead master for another's admissions, or a
// cluster that refuses every slot while one is not covered, shows here).
func clusterFigures(k clusterKill, ops []check.Op) (hit, served, otherDown int) {
	in := func(t int64) bool { return t >= k.start && t <= k.rejoined }
	for i := range ops {
		o := &ops[i]
		down := (o.Outcome == check.Unavailable || o.Outcome == check.Failed) && (in(o.Call) || in(o.Return))
		switch {
		case slices.Contains(k.victim, o.Resource):
			if down {
				hit++
			}
		case slices.Contains(k.others, o.Resource):
			if o.Status/100 == 2 && in(o.Call) && in(o.Return) {
				served++
			}
			if down {
				otherDown++
			}
		}
	}
	return hit, served, otherDown
}

// clusterFields: per round (comma lists in long mode) the killed shard's
// resources, promoted_ms and rejoined_ms from the kill, the other shards'
// 2xx answers and 503s or failures inside the window and the killed
// shard's 503s or failures;
// resume_s, from the last promotion until every resource answered 2xx to a
// request sent after it (reported, not judged: with
// FENCE_REDIS_MIN_REPLICAS=1 the promoted master acknowledges nothing
// until the killed node has rejoined as its replica); lost_marks.
func clusterFields(e *env, ops []check.Op, r *check.Report) []string {
	var victim, promoted, rejoined, served, hit, otherDown []string
	for _, k := range e.clusterKills {
		h, s, d := clusterFigures(k, ops)
		victim = append(victim, strings.Join(k.victim, "+"))
		promoted = append(promoted, strconv.FormatInt(time.Duration(k.promoted-k.start).Milliseconds(), 10))
		rejoined = append(rejoined, strconv.FormatInt(time.Duration(k.rejoined-k.start).Milliseconds(), 10))
		served = append(served, strconv.Itoa(s))
		hit = append(hit, strconv.Itoa(h))
		otherDown = append(otherDown, strconv.Itoa(d))
	}
	worst, missing := e.resume(ops)
	f := []string{fmt.Sprintf("killed_shard_resources=%s promoted_ms=%s rejoined_ms=%s other_shards_2xx=%s other_shards_unavailable=%s killed_shard_unavailable=%s resume_s=%.2f resources_not_resumed=%d",
		strings.Join(victim, ","), strings.Join(promoted, ","), strings.Join(rejoined, ","), strings.Join(served, ","), strings.Join(otherDown, ","), strings.Join(hit, ","),
		worst.Seconds(), missing)}
	return append(f, lostFields(e, ops, r)...)
}
