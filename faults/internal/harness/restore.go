package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
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
// The "coldall" control restarts every replica right after the store went
// back, so that none remembers the newer generation (what replicas without
// the generation check do), and runs no recovery: the stale tokens the
// older store admits are stale admissions.

// restoreAfter is how long the load runs between the backup and the
// restore: the marks admitted meanwhile are what the restore takes back.
const restoreAfter = 2 * time.Second

// restoreScenario runs lose (the store goes back) as a store loss with the
// runbook's recovery, or, in the "coldall" control, restarts every replica
// after it and lets the load run on.
func restoreScenario(lose func(ctx context.Context, e *env) error) func(ctx context.Context, e *env) error {
	return func(ctx context.Context, e *env) error {
		if e.opts.Break != "coldall" {
			return e.loseStore(ctx, func() error { return lose(ctx, e) })
		}
		if err := e.sleep(ctx, e.p.warmup); err != nil {
			return err
		}
		start := e.now()
		if err := lose(ctx, e); err != nil {
			return err
		}
		if e.rd != nil {
			// What the store holds now, against what was admitted before
			// it went back: lost_marks.
			reads, err := e.storeSnapshot()
			if err != nil {
				return err
			}
			e.checkpoint(e.wentBack, reads)
		}
		for _, r := range e.proxies {
			if err := r.Kill(); err != nil {
				return err
			}
			if err := r.Restart(); err != nil {
				return err
			}
		}
		e.fault(start, -1)
		return e.sleep(ctx, e.p.cooldown)
	}
}

// expectRestore is expectStoreLoss, except in the control, which runs no
// recovery and must fail on its figures.
func expectRestore(e *env, ops []check.Op) []string {
	if e.opts.Break == "coldall" {
		return nil
	}
	return expectStoreLoss(true)(e, ops)
}

// restoreFields: the store-loss figures, or in the control (no recovery)
// the marks the store lost.
func restoreFields(e *env, ops []check.Op, r *check.Report) []string {
	if e.opts.Break == "coldall" {
		return lostFields(e, ops, r)
	}
	return storeLossFields(e, ops, r)
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
	if err := e.master.Restart(); err != nil {
		return err
	}
	e.logf("SIGKILL redis-server pid %d, its AOF replaced by the backup of %v before, restarted as pid %d", pid, restoreAfter, e.master.Pid())
	return nil
}

// laggingFailover: the replica lags replicationLag behind; the master is
// killed and its link cut; the sentinels promote the replica, which misses
// the last marks (and the generations that came with them).
func laggingFailover(ctx context.Context, e *env) error {
	if err := e.replLink.Add("lag", "latency", "downstream", map[string]any{"latency": replicationLag.Milliseconds()}); err != nil {
		return err
	}
	if err := e.sleep(ctx, replicationLag); err != nil {
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
