package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// bolt-restore: a bolt file copied back from a backup. One process uses a
// bolt file, so the replica that remembers the newer generation is that
// process, across its restart, through the file beside the store
// (<FENCE_BOLT_PATH>.generation). Each variant plays, on a replica of its
// own and a resource of its own, with no load:
//
//	tokens 1..15 admitted; the replica stopped, its files copied aside (the
//	backup); started again, tokens 16..20 admitted; stopped; the backup put
//	back; started again; the stale tokens 15..19 sent.
//
//   - file-only: only the store file is put back; the generation file stays.
//     Every stale token must be answered 503 store-lost (nothing reaches the
//     upstream), fenceproxy_store_lost 1. Then the runbook with the real
//     CLI, the proxy stopped (it holds the file's lock): `marks raise` to 20,
//     `store init --force`; started again, token 21 is admitted and 19 is
//     refused 409. Its requests are the checked history.
//   - with-generation-file: both files put back, so nothing remembers the
//     newer generation: the documented limit, measured and printed as such
//     (a measure= line: detectable=no, and how many stale tokens reached its
//     upstream, one of its own outside the checked history).
//
// The "nogeneration" control removes the generation file in the file-only
// variant (a replica that remembers nothing, as without the generation
// check) and runs no recovery: the stale tokens are admitted, in the
// checked history, and the scenario fails.

// boltBackupAt and boltNewest are the marks at the backup and before the
// restore.
const (
	boltBackupAt = 15
	boltNewest   = 20
)

// boltVariant is what one variant of bolt-restore recorded.
type boltVariant struct {
	name       string
	sent       int // stale tokens sent after the restore
	storeLost  int // answered 503 store-lost
	admitted   int // answered 2xx
	forwarded  int // of the stale tokens, received by the upstream
	lostMetric float64
	window     int64 // up again to the first store-lost answer, ms (-1 none)
	recovered  bool  // token 21 admitted after the runbook (file-only)
}

// boltRestore plays both variants; the second on a replica and an
// upstream of its own, outside the checked history.
func boltRestore(ctx context.Context, e *env) error {
	up2, err := startUpstream(e.clock)
	if err != nil {
		return err
	}
	defer up2.close()
	r2, err := e.h.startProxy(len(e.proxies), up2.URL(), e.proxyEnv(), true)
	if err != nil {
		return err
	}
	fileOnly := &boltVariant{name: "file-only"}
	withGen := &boltVariant{name: "with-generation-file"}
	e.bolt = []*boltVariant{fileOnly, withGen}

	var checked []check.Op
	defer func() { e.addOps(checked...) }()
	if err := e.boltPlay(ctx, fileOnly, e.proxies[0], e.ld, e.up, resourceName(0), &checked); err != nil {
		return err
	}
	var unchecked []check.Op
	ld2 := newLoad(loadConfig{}, e.clock, []*Replica{r2}, up2.URL(), "bolt-generation-file")
	return e.boltPlay(ctx, withGen, r2, ld2, up2, resourceName(1), &unchecked)
}

// boltPlay plays one variant on replica r, through ld (whose replicas are
// r alone, or r first), on resource res; every request goes to ops.
func (e *env) boltPlay(ctx context.Context, v *boltVariant, r *Replica, ld *load, up *Upstream, res string, ops *[]check.Op) error {
	hc := newClient()
	defer hc.CloseIdleConnections()
	seq := 0
	send := func(token uint64) check.Op {
		seq++
		op := check.Op{ID: fmt.Sprintf("bolt-%s-%d", v.name, seq), Client: -2, Replica: ld.index(r), Resource: res, Token: token}
		ld.do(hc, &op)
		*ops = append(*ops, op)
		return op
	}
	admit := func(from, to uint64) error {
		for t := from; t <= to; t++ {
			if op := send(t); op.Outcome != check.Admitted {
				return fmt.Errorf("%s: token %d before the restore: %d %s", v.name, t, op.Status, op.Problem)
			}
		}
		return nil
	}
	db := filepath.Join(r.Dir, "fenceproxy.db")
	files := []string{db, db + ".generation"}
	backup, err := mkdir(e.h.dir, "bolt-backup-"+v.name)
	if err != nil {
		return err
	}

	if err := admit(1, boltBackupAt); err != nil {
		return err
	}
	r.Term(2 * time.Second)
	for _, f := range files {
		if err := copyFile(f, filepath.Join(backup, filepath.Base(f))); err != nil {
			return err
		}
	}
	if err := e.startBolt(r, true); err != nil {
		return err
	}
	if err := admit(boltBackupAt+1, boltNewest); err != nil {
		return err
	}
	hc.CloseIdleConnections()
	r.Term(2 * time.Second)

	// The restore: the store file, and the generation file too in the
	// second variant; the control loses the generation file instead.
	start := e.now()
	if v.name == "file-only" {
		e.wentBack = start
	}
	restore := files[:1]
	if v.name == "with-generation-file" {
		restore = files
	}
	for _, f := range restore {
		if err := copyFile(filepath.Join(backup, filepath.Base(f)), f); err != nil {
			return err
		}
	}
	control := e.opts.Break == "nogeneration" && v.name == "file-only"
	if control {
		if err := os.Remove(files[1]); err != nil {
			return err
		}
	}
	if err := e.startBolt(r, false); err != nil {
		return err
	}
	upAgain := e.now()
	e.logf("%s: %s put back from the copy taken at mark %d, after mark %d; restarted as pid %d",
		v.name, filepath.Base(restore[len(restore)-1]), boltBackupAt, boltNewest, r.Pid())
	v.window = -1
	for t := uint64(boltBackupAt); t < boltNewest; t++ {
		op := send(t)
		v.sent++
		switch {
		case op.Problem == problemStoreLost:
			v.storeLost++
			if v.window < 0 {
				v.window = time.Duration(op.Return - upAgain).Milliseconds()
			}
		case op.Outcome == check.Admitted:
			v.admitted++
		}
		if _, ok := up.Forward(op.ID); ok {
			v.forwarded++
		}
	}
	if v.lostMetric, err = r.metric("fenceproxy_store_lost"); err != nil {
		return err
	}
	if v.name != "file-only" || control {
		// Nothing to recover from (not detected): the load goes on.
		if v.name == "file-only" {
			e.fault(start, -1)
			if op := send(boltNewest + 1); op.Outcome != check.Admitted {
				return fmt.Errorf("%s: token %d after the restore: %d %s", v.name, boltNewest+1, op.Status, op.Problem)
			}
		}
		return nil
	}

	// The runbook, with the real CLI: the proxy stopped (it holds the
	// file's lock), the mark raised to the newest token, a forced record.
	hc.CloseIdleConnections()
	r.Term(2 * time.Second)
	if _, err := e.operator(ctx, "marks", "raise", "res/"+res, strconv.Itoa(boltNewest)); err != nil {
		return err
	}
	out, err := e.operator(ctx, "store", "init", "--force")
	if err != nil {
		return err
	}
	e.logf("%s: marks raised to %d, store init --force: %s", v.name, boltNewest, strings.TrimSpace(out))
	if err := e.startBolt(r, true); err != nil {
		return err
	}
	e.fault(start, -1)
	if op := send(boltNewest + 1); op.Outcome != check.Admitted {
		return fmt.Errorf("%s: token %d after the recovery: %d %s", v.name, boltNewest+1, op.Status, op.Problem)
	}
	if op := send(boltNewest - 1); op.Outcome != check.Stale {
		return fmt.Errorf("%s: token %d after the recovery: %d %s, want 409", v.name, boltNewest-1, op.Status, op.Problem)
	}
	v.recovered = true
	return nil
}

// startBolt starts r again on its files and waits for /healthz, and for
// /readyz when ready is set (a store that answers).
func (e *env) startBolt(r *Replica, ready bool) error {
	if err := r.Start(); err != nil {
		return err
	}
	return r.waitUp(ready)
}

// index is r's place among l's replicas.
func (l *load) index(r *Replica) int {
	for i, x := range l.replicas {
		if x == r {
			return i
		}
	}
	return -1
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// expectBoltRestore: in the file-only variant every stale token was
// answered store-lost, the replica reported it, and the runbook brought
// it back; the with-generation-file variant played to its end. The
// control expects nothing (its stale admissions fail it).
func expectBoltRestore(e *env, _ []check.Op) []string {
	if e.opts.Break == "nogeneration" {
		return nil
	}
	if len(e.bolt) != 2 {
		return []string{"bolt-restore did not play both variants"}
	}
	v := e.bolt[0]
	var out []string
	if v.storeLost != v.sent || v.sent == 0 {
		out = append(out, fmt.Sprintf("file-only: %d of %d stale tokens answered 503 store-lost", v.storeLost, v.sent))
	}
	if v.forwarded > 0 {
		out = append(out, fmt.Sprintf("file-only: %d stale tokens reached the upstream", v.forwarded))
	}
	if v.lostMetric != 1 {
		out = append(out, fmt.Sprintf("file-only: fenceproxy_store_lost %v, want 1", v.lostMetric))
	}
	if !v.recovered {
		out = append(out, "file-only: no recovery through the runbook")
	}
	if e.bolt[1].sent == 0 {
		out = append(out, "with-generation-file: no stale token sent")
	}
	return out
}

// boltRestoreFields: the file-only variant's figures.
func boltRestoreFields(e *env, _ []check.Op, _ *check.Report) []string {
	if len(e.bolt) == 0 {
		return nil
	}
	v := e.bolt[0]
	return []string{fmt.Sprintf("variant=%s stale_sent=%d detected=%d stale_forwarded=%d store_lost_metric=%.0f window_ms=%d recovered=%t",
		v.name, v.sent, v.storeLost, v.forwarded, v.lostMetric, v.window, v.recovered)}
}

// boltRestoreMeasures: the with-generation-file variant, the documented
// limit: whatever its figures, a measure, never a verdict.
func boltRestoreMeasures(e *env, _ []check.Op, _ *check.Report) []string {
	if len(e.bolt) < 2 || e.bolt[1].sent == 0 {
		return nil
	}
	v := e.bolt[1]
	detectable := "no"
	if v.storeLost == v.sent {
		detectable = "yes"
	}
	return []string{fmt.Sprintf("measure=bolt-restore variant=%s detectable=%s stale_sent=%d detected=%d stale_admitted=%d stale_forwarded=%d limit=documented",
		v.name, detectable, v.sent, v.storeLost, v.admitted, v.forwarded)}
}
