package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// The restore scenarios: the store goes back in time while both replicas
// run, having seen its newer state. Unlike redis-flush, what comes back is
// an older copy with the same identity record, so only the store's
// generation (advanced with every mark write, remembered by each replica)
// tells it apart. Every replica must refuse (503 store-lost) from the first
// request that meets the older store; then the operator recovers as the
// runbook says (marks raised with `fenceproxy marks raise`, then
// `fenceproxy store init --force`, the real CLI), and the load is admitted
// again (loseStore).
//
//   - redis-restore: the server's AOF directory copied aside mid-load (a
//     backup), restoreAfter more of load, then the server killed, its files
//     replaced by the backup, and restarted on them.
//   - lagging-failover: a master, one replica behind a 2 s replication lag,
//     FENCE_REDIS_MIN_REPLICAS=0 (no WAIT); the master killed and its link
//     cut, the sentinels promote the lagging replica. Once a warm replica
//     has met the older store, replica 1 is restarted cold (it never saw
//     the newer generation) and must refuse too.
//
// The window that remains (window_ms): from the moment the store went back
// until the first request was answered store-lost. A replica restarted
// cold in that window, before any warm one met the older store, cannot
// tell; the scenarios print it and do not run that case.
//
// Each restore scenario also sends one stale token it can name: before the
// backup, token restoreProbeToken on a resource of its own through replica
// 0; between the backup and the restore, the next token there through
// replica 0, and a write through replica 1 (so that it has seen a
// generation the backup lacks); once the store went back, restoreProbeToken
// again through replica 1, which never saw that resource's newer mark. The
// older store holds restoreProbeToken as the mark: only the generation
// check can refuse it (503 store-lost), and the scenario requires that it
// does (stale_probe=store-lost).
//
// The "nogeneration" control (redis-restore) breaks only that check: the restore
// puts back the backup with its generation raised far above any a replica
// has seen (a command appended to the restored AOF, applied as the server
// loads it), as replicas without the check would see it. Everything else is
// as in the real run, except that no recovery runs (nothing tells anyone to
// recover): the probe and the load's stale holders are admitted from the
// older store, stale_admissions, stale_below_admitted and unfenced_forwards,
// which the real run keeps at 0 in the same situation. The marks the store
// took back are printed (erased_marks), not counted as lost: the real run
// loses them too until its recovery; and reads of the older store are left
// out of the history for the same reason.

// restoreAfter is how long the load runs between the backup and the
// restore: the marks admitted meanwhile are what the restore takes back.
const restoreAfter = 2 * time.Second

const (
	restoreProbeResource = "restore-probe"
	restoreWarmResource  = "restore-warm"
	restoreProbeToken    = 10
)

// restoreProbe is what the probe of a restore scenario recorded.
type restoreProbe struct {
	hc     *http.Client
	sent   int    // requests sent, for their ids (each in the checked history: addOps)
	answer string // the stale token's last answer: store-lost, admitted, stale, unavailable, failed
}

// restoreScenario runs lose (the store goes back) as a store loss with the
// runbook's recovery, or, in the "nogeneration" control, with the generation
// check defeated and no recovery. lose calls e.probeBetween once its backup
// holds the probe's first token and not its second.
func restoreScenario(lose func(ctx context.Context, e *env) error) func(ctx context.Context, e *env) error {
	return func(ctx context.Context, e *env) error {
		e.probe = &restoreProbe{hc: newClient()}
		defer e.probe.hc.CloseIdleConnections()
		goBack := func() error {
			if err := e.probeSend(0, restoreProbeResource, restoreProbeToken); err != nil {
				return err
			}
			if err := lose(ctx, e); err != nil {
				return err
			}
			// The store is back in time from here: the loss's figures
			// (window_ms, what was admitted while it was lost) count from
			// now, not from after the probe below, which may retry for
			// seconds.
			e.loss.lost = e.now()
			// What the older store holds, before the probe and the load's
			// requests meet it (warm replicas write marks back from their
			// caches): erased_marks.
			if e.rd != nil {
				reads, err := e.storeSnapshot()
				if err != nil {
					return err
				}
				e.loss.erased = reads
			}
			return e.probeStale(ctx)
		}
		if e.opts.Break != "nogeneration" {
			return e.loseStore(ctx, goBack)
		}
		if e.sc.name != "redis-restore" {
			return fmt.Errorf("the nogeneration control runs on redis-restore here (bolt-restore has its own), not %s", e.sc.name)
		}
		if err := e.sleep(ctx, e.p.warmup); err != nil {
			return err
		}
		start := e.now()
		e.loss = &storeLoss{start: start}
		if err := goBack(); err != nil {
			return err
		}
		e.fault(start, -1)
		return e.sleep(ctx, e.p.cooldown)
	}
}

// probeSend sends token on res through replica i and requires it admitted.
func (e *env) probeSend(i int, res string, token uint64) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		op := e.probeOnce(i, res, token)
		if op.Outcome == check.Admitted {
			return nil
		}
		if !probeRetries(op) || time.Now().After(deadline) {
			return fmt.Errorf("probe %s token %d through replica %d before the store went back: %d %s", res, token, i, op.Status, op.Problem)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// probeOnce sends one probe request through replica i, its operation in
// the checked history.
func (e *env) probeOnce(i int, res string, token uint64) check.Op {
	pr := e.probe
	op := check.Op{ID: fmt.Sprintf("%s-probe-%d", e.sc.name, pr.sent), Client: -3, Replica: i, Resource: res, Token: token}
	pr.sent++
	e.ld.do(pr.hc, &op)
	e.addOps(op)
	return op
}

// probeRetries reports whether op's answer says only that the store could
// not be reached (members or a server still coming back, a broken
// connection), for which a probe is sent again.
func probeRetries(op check.Op) bool {
	return op.Problem != problemStoreLost && (op.Outcome == check.Unavailable || op.Outcome == check.Failed)
}

// probeBetween runs between the backup and the restore: the probe's newer
// token, which the restore takes back, and replica 1's write, which shows
// it a generation the backup lacks.
func (e *env) probeBetween() error {
	if err := e.probeSend(0, restoreProbeResource, restoreProbeToken+1); err != nil {
		return err
	}
	return e.probeSend(1, restoreWarmResource, restoreProbeToken)
}

// probeStale sends the stale token through replica 1 once the store went
// back, again while the answer says only that the store could not be
// reached (the restarted server, a broken connection), for 10 s at most.
func (e *env) probeStale(ctx context.Context) error {
	pr := e.probe
	for deadline := time.Now().Add(10 * time.Second); ; {
		op := e.probeOnce(1, restoreProbeResource, restoreProbeToken)
		switch {
		case op.Problem == problemStoreLost:
			pr.answer = "store-lost"
		case op.Outcome == check.Admitted:
			pr.answer = "admitted"
		case op.Outcome == check.Stale:
			pr.answer = "stale"
		case op.Outcome == check.Unavailable:
			pr.answer = "unavailable"
		default:
			pr.answer = "failed"
		}
		if pr.answer != "unavailable" && pr.answer != "failed" || time.Now().After(deadline) {
			e.logf("stale probe %s token %d through replica 1: %s (%d)", restoreProbeResource, restoreProbeToken, pr.answer, op.Status)
			return nil
		}
		if err := e.sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// expectRestore is expectStoreLoss and the stale probe refused store-lost;
// the control runs no recovery and must fail on its figures.
func expectRestore(e *env, ops []check.Op) []string {
	if e.opts.Break == "nogeneration" {
		if e.probe == nil || e.probe.answer != "admitted" {
			return []string{"nogeneration: the stale probe was not admitted: the restore's generation did not pass for current"}
		}
		return nil
	}
	out := expectStoreLoss(true)(e, ops)
	if e.probe != nil && e.probe.answer != "store-lost" {
		out = append(out, fmt.Sprintf("the stale probe through replica 1, which had seen the newer generation, was answered %s, not 503 store-lost", e.probe.answer))
	}
	return out
}

// restoreFields: the store-loss figures, or in the control (no recovery)
// the marks the restore took back; then the stale probe's answer.
func restoreFields(e *env, ops []check.Op, r *check.Report) []string {
	var f []string
	if e.opts.Break == "nogeneration" {
		if e.loss != nil {
			n, _ := marksBelow(ops, e.lossAt(), e.loss.erased)
			f = append(f, fmt.Sprintf("erased_marks=%d", n))
		}
	} else {
		f = storeLossFields(e, ops, r)
	}
	answer := "none"
	if e.probe != nil && e.probe.answer != "" {
		answer = e.probe.answer
	}
	return append(f, "stale_probe="+answer)
}

// redisRestore: back up the AOF directory, let the load run, then put the
// backup back under a restarted server.
func redisRestore(ctx context.Context, e *env) error {
	src := filepath.Join(e.master.Dir, "appendonlydir")
	backup, err := mkdir(e.h.dir, "backup")
	if err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src, backup+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("back up %s: %v: %s", src, err, out)
	}
	e.logf("backed up %s", src)
	if err := e.probeBetween(); err != nil {
		return err
	}
	if err := e.sleep(ctx, restoreAfter); err != nil {
		return err
	}
	pid := e.master.Pid()
	e.wentBack = e.now()
	if err := e.master.Kill(); err != nil {
		return err
	}
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(backup, "appendonlydir"), e.master.Dir+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("restore %s: %v: %s", src, err, out)
	}
	if e.opts.Break == "nogeneration" {
		if err := appendToAOF(src, "HINCRBY", generationKey, "g", strconv.Itoa(generationForge)); err != nil {
			return fmt.Errorf("nogeneration: %w", err)
		}
	}
	if err := e.master.Restart(); err != nil {
		return err
	}
	e.logf("SIGKILL redis-server pid %d, its AOF replaced by the backup of %v before, restarted as pid %d", pid, restoreAfter, e.master.Pid())
	if e.opts.Break == "nogeneration" {
		g, err := redistest.Do(e.master.Addr(), nil, "HGET", generationKey, "g")
		if err != nil {
			return fmt.Errorf("nogeneration: the restored generation: %w", err)
		}
		if n, _ := strconv.ParseInt(fmt.Sprint(g), 10, 64); n < generationForge {
			return fmt.Errorf("nogeneration: the restored generation is %v, not raised by %d", g, generationForge)
		}
		e.logf("the restored copy's generation raised to %v", g)
	}
	return nil
}

// laggingFailover: the replica lags replicationLag behind; the master is
// killed and its link cut; the sentinels promote the replica, which misses
// the last marks (and the generations that came with them).
func laggingFailover(ctx context.Context, e *env) error {
	if err := e.replLink.Add("lag", "latency", "downstream", map[string]any{"latency": replicationLag.Milliseconds()}); err != nil {
		return err
	}
	// Halfway through the lag: the probe's newer token reaches the
	// master, and the replica only after the kill.
	if err := e.sleep(ctx, replicationLag/2); err != nil {
		return err
	}
	if err := e.probeBetween(); err != nil {
		return err
	}
	if err := e.sleep(ctx, replicationLag/2); err != nil {
		return err
	}
	old, next := e.master, e.replica
	pid := old.Pid()
	e.wentBack = e.now()
	if err := old.Kill(); err != nil {
		return err
	}
	e.replLink.Disable()
	t0 := time.Now()
	if err := e.sents.waitMaster(next.Addr(), 30*time.Second); err != nil {
		return err
	}
	e.master, e.replica = next, old
	e.logf("SIGKILL master %s pid %d with a %v replication lag; sentinels promoted %s after %v", old.Addr(), pid, replicationLag,
		next.Addr(), time.Since(t0).Round(time.Millisecond))
	return nil
}

// etcdRestore: a file-level backup of every member (all three killed,
// their data directories copied, relaunched together, as a volume
// snapshot of a stopped cluster), restoreAfter more of load, then every
// member killed, its data directory replaced by the backup, and relaunched
// together: the cluster's revision and marks go back to the backup's.
func etcdRestore(ctx context.Context, e *env) error {
	ms := e.etcd.Members
	backup, err := mkdir(e.h.dir, "etcd-backup")
	if err != nil {
		return err
	}
	for _, m := range ms {
		m.Kill()
	}
	for _, m := range ms {
		dst, err := mkdir(backup, m.Name)
		if err != nil {
			return err
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(m.Dir(), "data"), dst+"/").CombinedOutput(); err != nil {
			return fmt.Errorf("back up %s: %v: %s", m.Name, err, out)
		}
	}
	if err := relaunchAll(e); err != nil {
		return err
	}
	e.logf("backed up the data directories of %d members", len(ms))
	if err := e.probeBetween(); err != nil {
		return err
	}
	if err := e.sleep(ctx, restoreAfter); err != nil {
		return err
	}
	e.wentBack = e.now()
	for _, m := range ms {
		m.Kill()
	}
	for _, m := range ms {
		data := filepath.Join(m.Dir(), "data")
		if err := os.RemoveAll(data); err != nil {
			return err
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(backup, m.Name, "data"), m.Dir()+"/").CombinedOutput(); err != nil {
			return fmt.Errorf("restore %s: %v: %s", m.Name, err, out)
		}
	}
	if err := relaunchAll(e); err != nil {
		return err
	}
	e.logf("every member killed, its data directory replaced by the backup of %v before, relaunched", restoreAfter)
	return nil
}

// relaunchAll starts every etcd member again at once (one alone has no
// quorum to report itself healthy).
func relaunchAll(e *env) error {
	errs := make(chan error, len(e.etcd.Members))
	for _, m := range e.etcd.Members {
		go func() { errs <- m.Relaunch() }()
	}
	var first error
	for range e.etcd.Members {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
