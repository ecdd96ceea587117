package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// cluster-shard-kill: a whole shard lost, with no failover possible. Under
// load the replica of the shard that holds the most resources is
// SIGKILLed, then its master; the shard stays down for shardDown; then the
// master restarts on its files (AOF always) and takes its slots back, and
// its replica restarts and rejoins. While the shard is down its resources
// must be refused: a request for one of them sent after the master's kill
// and answered 2xx before its restart would have been forwarded without an
// admission (a violation: dead_shard_2xx). The other shards must keep
// admitting. The restarted master's marks are checked against every token
// admitted before the first kill (lost_marks).

const shardDown = 3 * time.Second

// shardKill is one cluster-shard-kill.
type shardKill struct {
	victim, others []string
	// start: the replica's kill; dead: the master's; back: the master's
	// restart begins; served: every node sees it serve its slots again;
	// rejoined: its replica in sync again.
	start, dead, back, served, rejoined int64
}

func clusterShardKill(ctx context.Context, e *env) error {
	sh, others, err := e.nextVictim(ctx, 0)
	if err != nil {
		return err
	}
	master, replica := sh.master, sh.replica
	k := &shardKill{victim: sh.resources, others: others, start: e.now()}
	// The replica first: with it gone, nothing can take the master's place.
	if err := replica.Kill(); err != nil {
		return err
	}
	if err := master.Kill(); err != nil {
		return err
	}
	k.dead = e.now()
	if err := e.sleep(ctx, shardDown); err != nil {
		return err
	}
	k.back = e.now()
	if err := master.Restart(); err != nil {
		return err
	}
	if e.rd != nil {
		// What the master read back from its files, read as soon as it
		// answers PING: a proxy's admission can race it by milliseconds
		// (a later admission can only raise a mark, and would hide one
		// lost).
		var reads []check.Op
		if err := waitFor(master.Proc, 30*time.Second, master.Name+" serves its marks", func() error {
			var err error
			reads, err = e.rd.replicaSnapshot(master.Addr(), sh.resources)
			return err
		}); err != nil {
			return err
		}
		e.checkpoint(k.start, reads)
	}
	// Every live node must see the master serve its slots again (the
	// others clear its failure a while after it answers).
	for _, n := range e.nodes {
		if n == replica {
			continue
		}
		if err := waitFor(n.Proc, 30*time.Second, n.Name+" sees "+master.Name+" serve its slots", func() error {
			return redistest.ClusterReady(n.Addr(), clusterNodes)
		}); err != nil {
			return err
		}
	}
	k.served = e.now()
	e.promoted = k.served
	if err := rejoin(replica, master); err != nil {
		return err
	}
	k.rejoined = e.now()
	e.mu.Lock()
	e.shardKill = k
	e.mu.Unlock()
	e.fault(k.start, -1)
	e.logf("SIGKILL replica %s and master %s (resources %s); master restarted after %v, serving after %v; replica in sync after %v",
		replica.Addr(), master.Addr(), strings.Join(sh.resources, ","), dur(k.back-k.start), dur(k.served-k.start), dur(k.rejoined-k.start))
	if err := e.sleep(ctx, e.p.cooldown); err != nil {
		return err
	}
	return e.noteDropped()
}

// shardKillFigures: the dead shard's requests sent after its master's kill
// and answered before its restart, 2xx (deadOK, must be 0) and 503 or
// failed (deadDown); the other shards' requests sent and answered 2xx in
// that time (served), and 503 or failed (otherDown, reported).
func shardKillFigures(k *shardKill, ops []check.Op) (deadOK, deadDown, served, otherDown int) {
	for i := range ops {
		o := &ops[i]
		if o.Call < k.dead || o.Return > k.back {
			continue
		}
		down := o.Outcome == check.Unavailable || o.Outcome == check.Failed
		switch {
		case slices.Contains(k.victim, o.Resource):
			if o.Status/100 == 2 {
				deadOK++
			}
			if down {
				deadDown++
			}
		case slices.Contains(k.others, o.Resource):
			if o.Status/100 == 2 {
				served++
			}
			if down {
				otherDown++
			}
		}
	}
	return deadOK, deadDown, served, otherDown
}

// judgeShardKill: nothing for the dead shard's resources admitted while it
// was down, and nothing for the other shards' refused then.
func judgeShardKill(e *env, ops []check.Op, res *Result) {
	if e.shardKill == nil {
		return
	}
	n, _, _, otherDown := shardKillFigures(e.shardKill, ops)
	if n > 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("cluster-shard-kill: %d requests for the dead shard's resources (%s) answered 2xx while its master and replica were down",
			n, strings.Join(e.shardKill.victim, ",")))
	}
	if otherDown > 0 {
		res.Violations = append(res.Violations, otherShardsDown("cluster-shard-kill", otherDown))
	}
}

// expectShardKill: the kill showed (the dead shard's requests refused, or
// admitted: a violation) and the other shards kept admitting.
func expectShardKill(e *env, ops []check.Op) []string {
	if e.shardKill == nil {
		return []string{"no shard was killed"}
	}
	var out []string
	deadOK, down, served, _ := shardKillFigures(e.shardKill, ops)
	// Nothing refused because everything was admitted is judgeShardKill's
	// violation, not a fault that failed to show.
	if down == 0 && deadOK == 0 {
		out = append(out, "no request for the dead shard's resources was refused while it was down")
	}
	if served == 0 {
		out = append(out, "the other shards admitted nothing while one was down")
	}
	return out
}

// shardKillFields: the dead shard's resources, how long it was down
// (down_ms: from the master's kill to its restart; serving_ms: to every
// node seeing it serve again), the figures of shardKillFigures, resume_s
// (from serving again until every resource answered 2xx to a request sent
// after it) and lost_marks.
func shardKillFields(e *env, ops []check.Op, r *check.Report) []string {
	k := e.shardKill
	if k == nil {
		return nil
	}
	deadOK, deadDown, served, otherDown := shardKillFigures(k, ops)
	worst, missing := e.resume(ops)
	f := []string{fmt.Sprintf("dead_shard_resources=%s down_ms=%d serving_ms=%d dead_shard_2xx=%d dead_shard_unavailable=%d other_shards_2xx=%d other_shards_unavailable=%d resume_s=%.2f resources_not_resumed=%d",
		strings.Join(k.victim, "+"), time.Duration(k.back-k.dead).Milliseconds(), time.Duration(k.served-k.dead).Milliseconds(),
		deadOK, deadDown, served, otherDown, worst.Seconds(), missing)}
	return append(f, lostFields(e, ops, r)...)
}
