package harness

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// The store-loss scenarios (redis-flush, redis-restart-nopersist): the store
// forgets every mark and its identity record while both replicas keep
// running. The replicas must notice at the first admission that meets the
// loss and refuse every fenced request (503 store-lost) until the operator
// raises the marks and forces a new identity record, as the README tells
// them to; then admit again.

// Problem types the scenarios tell apart.
const (
	problemStoreLost        = "urn:fenceproxy:store-lost"
	problemStoreUnavailable = "urn:fenceproxy:store-unavailable"
)

// noPersistArgs: Redis that keeps nothing across a restart.
var noPersistArgs = []string{"--appendonly", "no", "--save", ""}

// storeLoss is what a store-loss scenario recorded, on the history's clock.
type storeLoss struct {
	start    int64 // the fault began (FLUSHALL sent, SIGKILL)
	lost     int64 // the store is up and empty: every admission from here meets the loss
	raised   int64 // the last `marks raise` returned
	restore  int64 // `store init --force` is about to run
	ready    int64 // both replicas ready again
	lostSeen int   // replicas that showed the loss (/readyz 503 and fenceproxy_store_lost 1)
	raisedN  int   // marks raised
	erased   []check.Op
	// firstLost is when the first request sent after the loss was
	// answered store-lost: lost until then is the window in which a
	// replica that never saw the store's newer state (restarted cold)
	// could still be answered by it.
	firstLost int64
	// coldAt is when the replica restarted cold (sc.cold) was up again,
	// coldLost whether it reported the loss.
	coldAt   int64
	coldLost bool
	readyz   []string // /readyz of each replica once it reported the loss
}

// redisFlush: FLUSHALL on the running Redis mid-load.
func redisFlush(ctx context.Context, e *env) error {
	return e.loseStore(ctx, func() error {
		c := redis.NewClient(&redis.Options{Addr: e.master.Addr(), MaxRetries: -1, DisableIdentity: true, PoolSize: 1})
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.FlushAll(cctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL: %w", err)
		}
		e.logf("FLUSHALL on %s", e.master.Addr())
		return nil
	})
}

// redisRestartNoPersist: SIGKILL a Redis without AOF or snapshots, restart it
// a second later, empty, while the replicas keep running.
func redisRestartNoPersist(ctx context.Context, e *env) error {
	return e.loseStore(ctx, func() error {
		pid := e.master.Pid()
		if err := e.master.Kill(); err != nil {
			return err
		}
		if err := e.sleep(ctx, time.Second); err != nil {
			return err
		}
		if err := e.master.Restart(); err != nil {
			return err
		}
		e.logf("SIGKILL redis-server pid %d (no persistence), restarted empty as pid %d", pid, e.master.Pid())
		return nil
	})
}

// loseStore runs lose mid-load, checks that both replicas noticed, then
// recovers as the operator would: once every request sent before the fault
// has its answer, it raises each mark to the greatest the history
// established (admitted tokens, marks reported by 409s, marks read before
// the fault), with the real binary, and forces a new identity record.
func (e *env) loseStore(ctx context.Context, lose func() error) error {
	if err := e.sleep(ctx, e.p.warmup); err != nil {
		return err
	}
	sl := &storeLoss{start: e.now()}
	e.loss = sl
	if err := lose(); err != nil {
		return err
	}
	if sl.lost == 0 { // a restore set it when the store went back (restore.go)
		sl.lost = e.now()
	}
	if e.rd != nil && sl.erased == nil { // a restore took it already (restore.go)
		reads, err := e.storeSnapshot()
		if err != nil {
			return err
		}
		sl.erased = reads
	}
	// Every replica must show the loss: the gauge at 1 (and /readyz, which
	// may or may not follow the store, is reported).
	sl.lostSeen = e.replicasReportLost(e.proxies, sl)
	if sl.firstLost = e.firstLostAnswer(sl.lost); sl.firstLost > 0 && e.sc.cold {
		// A replica restarted cold once a warm one has met the loss: it
		// never saw what the store had before, and must refuse too.
		r := e.proxies[1]
		if err := r.Restart(); err != nil {
			return err
		}
		sl.coldAt = e.now()
		sl.coldLost = e.replicasReportLost([]*Replica{r}, sl) == 1
		e.logf("%s restarted cold after the loss; reports it lost: %t", r.Name, sl.coldLost)
	}
	// Requests sent before the fault may still be admitted (held at the
	// drain barrier, at the upstream): wait for their answers, so that
	// the history holds every token admitted before the loss.
	if err := e.ld.settled(ctx, sl.start, 3*e.upstreamTimeout()); err != nil {
		return err
	}
	if err := e.sleep(ctx, 500*time.Millisecond); err != nil {
		return err
	}

	// The operator: raise the marks, then force the record.
	hi := map[string]uint64{}
	ops := e.ld.history()
	if e.rd != nil {
		ops = append(ops, e.rd.history()...)
	}
	e.mu.Lock()
	ops = append(ops, e.extra...) // the scenario's own requests (a restore's probe)
	e.mu.Unlock()
	for i := range ops {
		o := &ops[i]
		if o.Outcome == check.Read && o.Return >= sl.start {
			continue // reads of the emptied store
		}
		if m, ok := o.Establishes(); ok {
			hi[o.Resource] = max(hi[o.Resource], m)
		}
	}
	for _, res := range slices.Sorted(maps.Keys(hi)) {
		if hi[res] == 0 || e.opts.Break == "noraise" {
			continue
		}
		if _, err := e.operator(ctx, "marks", "raise", "res/"+res, strconv.FormatUint(hi[res], 10)); err != nil {
			return err
		}
		sl.raisedN++
	}
	sl.raised = e.now()
	if e.rd != nil {
		// What the store holds now, against what was admitted before it
		// lost or went back: lostMarks counts what the recovery left below.
		reads, err := e.storeSnapshot()
		if err != nil {
			return err
		}
		e.checkpointLoss(reads)
	}
	sl.restore = e.now()
	out, err := e.operator(ctx, "store", "init", "--force")
	if err != nil {
		return err
	}
	e.logf("raised %d marks, store init --force: %s", sl.raisedN, strings.TrimSpace(out))
	for _, r := range e.proxies {
		err := waitFor(r.Proc, 15*time.Second, r.Name+" resumes after store init --force", func() error {
			v, err := r.metric("fenceproxy_store_lost")
			if err != nil {
				return err
			}
			if v != 0 {
				return fmt.Errorf("fenceproxy_store_lost %v", v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := r.waitUp(true); err != nil {
			return fmt.Errorf("after store init --force: %w", err)
		}
	}
	sl.ready = e.now()
	e.fault(sl.start, -1)
	return e.sleep(ctx, e.p.cooldown)
}

// storeSnapshot reads every mark from the store as it is now: the Redis
// master, or every etcd member.
func (e *env) storeSnapshot() ([]check.Op, error) {
	if e.etcd != nil {
		return e.etcdSnapshot(e.etcd.Members...)
	}
	return e.rd.snapshot(e.master.Addr())
}

// replicasReportLost waits (5 s at most each) until each replica's
// fenceproxy_store_lost is 1, and returns how many did; their /readyz
// answers go to sl.readyz.
func (e *env) replicasReportLost(rs []*Replica, sl *storeLoss) int {
	n := 0
	for _, r := range rs {
		err := waitFor(r.Proc, 5*time.Second, r.Name+" reports the store lost", func() error {
			v, err := r.metric("fenceproxy_store_lost")
			if err != nil {
				return err
			}
			if v != 1 {
				return fmt.Errorf("fenceproxy_store_lost %v", v)
			}
			return nil
		})
		if err != nil {
			e.logf("%v", err)
			continue
		}
		code, _, _ := adminGet(r.AdminAddr, "/readyz")
		sl.readyz = append(sl.readyz, strconv.Itoa(code))
		n++
	}
	return n
}

// firstLostAnswer returns when the first request sent after t was answered
// store-lost (0: none yet).
func (e *env) firstLostAnswer(t int64) int64 {
	var first int64
	for _, o := range e.ld.history() {
		if o.Problem == problemStoreLost && o.Call >= t && (first == 0 || o.Return < first) {
			first = o.Return
		}
	}
	return first
}

// operator runs the fenceproxy binary with args and the replicas'
// environment (FENCE_UPSTREAM_URL left out: the commands do not need it).
func (e *env) operator(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, e.h.bin, args...)
	for _, kv := range e.proxies[0].Env {
		if !strings.HasPrefix(kv, "FENCE_UPSTREAM_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("fenceproxy %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// dropLossReads leaves out the reads that overlap the loss, up to the last
// raised mark: they saw the emptied store (the injected fault), which the
// max-register model cannot express; what the store holds after the
// restore is checked as usual. The "nogeneration" control runs no
// recovery: every read from the fault on is left out.
func (e *env) dropLossReads(ops []check.Op) []check.Op {
	sl := e.loss
	if sl == nil {
		return ops
	}
	until := sl.raised
	if e.opts.Break == "nogeneration" {
		// No recovery: every later read sees the older store.
		until = math.MaxInt64
	}
	if until == 0 {
		return ops
	}
	out := ops[:0:0]
	for _, o := range ops {
		if o.Outcome == check.Read && o.Return >= sl.start && o.Call <= until {
			continue
		}
		out = append(out, o)
	}
	return out
}

// lossCounts: the answers of the requests sent once the store was lost and
// answered before the operator's forced record: store-lost refusals, other
// 503s, and anything else (admitted, 409, failed).
type lossCounts struct {
	storeLost, inLoss, lostAns, unavailable, admitted, other int
}

func (e *env) lossCounts(ops []check.Op) lossCounts {
	var c lossCounts
	sl := e.loss
	fwd := map[string]int64{}
	for _, f := range e.up.Forwards() {
		if at, ok := fwd[f.ID]; !ok || f.At < at {
			fwd[f.ID] = f.At
		}
	}
	for i := range ops {
		o := &ops[i]
		if o.Outcome == check.Read {
			continue
		}
		if o.Problem == problemStoreLost {
			c.storeLost++
		}
		if sl == nil || o.Call <= sl.lost || o.Call >= sl.restore {
			continue
		}
		// Sent after the loss and admitted before the operator's record
		// existed: answered before it, or received by the upstream before.
		if o.Outcome == check.Admitted && (o.Return < sl.restore || (fwd[o.ID] != 0 && fwd[o.ID] < sl.restore)) {
			c.admitted++
		}
		if o.Return >= sl.restore {
			continue
		}
		c.inLoss++
		switch {
		case o.Problem == problemStoreLost:
			c.lostAns++
		case o.Outcome == check.Unavailable:
			c.unavailable++
		case o.Outcome == check.Failed && o.Status == 0:
			// No answer at all: a replica restarted (cold) refused the
			// connection; nothing was decided.
		case o.Outcome != check.Admitted:
			c.other++
		}
	}
	return c
}

// expectStoreLoss: both replicas showed the loss, some requests were
// refused store-lost, none sent after the loss was admitted before the
// operator's record, and every answer in between was store-lost (with
// allowUnavailable, a 503 store-unavailable too: a restarted Redis breaks
// the replicas' connections, and the first use of one may fail).
func expectStoreLoss(allowUnavailable bool) func(e *env, ops []check.Op) []string {
	return func(e *env, ops []check.Op) []string {
		sl := e.loss
		if sl == nil {
			return []string{"the store was never lost"}
		}
		var out []string
		if sl.lostSeen != len(e.proxies) {
			out = append(out, fmt.Sprintf("%d of %d replicas reported the store lost (fenceproxy_store_lost 1)",
				sl.lostSeen, len(e.proxies)))
		}
		if e.sc.cold && !sl.coldLost {
			out = append(out, "the replica restarted cold after the loss did not report it (fenceproxy_store_lost 1)")
		}
		c := e.lossCounts(ops)
		if c.lostAns == 0 {
			out = append(out, "no request was refused 503 store-lost while the store was lost")
		}
		if c.admitted > 0 {
			out = append(out, fmt.Sprintf("%d requests sent after the loss were admitted before the operator's restore", c.admitted))
		}
		if c.other > 0 || (!allowUnavailable && c.unavailable > 0) {
			out = append(out, fmt.Sprintf("%d requests answered other than 503 store-lost while the store was lost",
				c.other+map[bool]int{true: 0, false: c.unavailable}[allowUnavailable]))
		}
		return out
	}
}

func storeLossFields(e *env, ops []check.Op, _ *check.Report) []string {
	sl := e.loss
	if sl == nil {
		return nil
	}
	c := e.lossCounts(ops)
	// Marks the fault erased or took back: below the greatest token
	// admitted before it.
	erased, _ := marksBelow(ops, e.lossAt(), sl.erased)
	n, tok := e.lostMarks(ops)
	ms := func(a, b int64) int64 { return time.Duration(b - a).Milliseconds() }
	window := "none"
	if sl.firstLost > 0 {
		window = strconv.FormatInt(ms(sl.lost, sl.firstLost), 10)
	}
	f := []string{fmt.Sprintf("store_lost=%d loss_requests=%d loss_store_lost=%d loss_unavailable=%d loss_admitted=%d loss_other=%d "+
		"replicas_lost=%d erased_marks=%d raised=%d lost_marks=%d lost_tokens=%d refused_ms=%d ready_after_init_ms=%d window_ms=%s readyz_when_lost=%s",
		c.storeLost, c.inLoss, c.lostAns, c.unavailable, c.admitted, c.other,
		sl.lostSeen, erased, sl.raisedN, n, tok, ms(sl.lost, sl.restore), ms(sl.restore, sl.ready), window, joinOr(sl.readyz, "none"))}
	if e.sc.cold {
		f = append(f, fmt.Sprintf("cold_restarted=%t cold_lost=%t", sl.coldAt > 0, sl.coldLost))
	}
	return f
}

// metric sums the samples of one metric (every label set) in the
// replica's /metrics.
func (r *Replica) metric(name string) (float64, error) {
	code, body, err := adminGet(r.AdminAddr, "/metrics")
	if err != nil {
		return 0, fmt.Errorf("%s /metrics: %w", r.Name, err)
	}
	if code != 200 {
		return 0, fmt.Errorf("%s /metrics: %d", r.Name, code)
	}
	return metricSum(body, name)
}

// metricSum sums the samples of metric name in a Prometheus text
// exposition.
func metricSum(text, name string) (float64, error) {
	var sum float64
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// healedMarks sums fenceproxy_mark_regressions_total over the replicas:
// admissions in which a replica found the store's mark below one it had
// seen, and wrote it back.
func (e *env) healedMarks() (float64, error) {
	var sum float64
	for _, r := range e.proxies {
		v, err := r.metric("fenceproxy_mark_regressions_total")
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// lostHealedFields: lostFields, and what the replicas healed.
func lostHealedFields(e *env, ops []check.Op, r *check.Report) []string {
	f := lostFields(e, ops, r)
	if e.healed >= 0 {
		f = append(f, fmt.Sprintf("healed=%.0f", e.healed))
	}
	return f
}
