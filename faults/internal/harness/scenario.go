package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// scenarios returns every scenario, in the order they run.
func scenarios(p params) []*scenario {
	return []*scenario{
		{name: "redis-kill", topo: single, inject: redisKill, expect: expectUnavailable(-1), fields: lostFields},
		// The store forgets everything while the replicas run: they must
		// refuse (503 store-lost) until the operator's restore.
		{name: "redis-flush", topo: single, inject: redisFlush, expect: expectStoreLoss(false), fields: storeLossFields},
		{name: "redis-restart-nopersist", topo: single, redisArgs: noPersistArgs, inject: redisRestartNoPersist,
			expect: expectStoreLoss(true), fields: storeLossFields},
		{name: "redis-pause", topo: single, inject: redisPause, expect: expectUnavailable(-1)},
		{name: "proxy-kill", topo: single, inject: proxyKill, expect: expectOtherServes(true), fields: killedFields},
		// The pause (2 s) outlasts the frozen replica's upstream deadline: the
		// others pass the barrier when its requests expire, and it must not
		// send them when it resumes.
		{name: "proxy-pause", topo: single, upstreamTimeout: time.Second, inject: proxyPause, expect: expectOtherServes(false), fields: pausedFields},
		{name: "network-latency", topo: single, viaToxic: true, inject: networkLatency, expect: expectUnavailable(-1)},
		{name: "network-reset", topo: single, viaToxic: true, inject: networkReset, expect: expectUnavailable(-1)},
		{name: "network-cut", topo: single, viaToxic: true, inject: networkCut, expect: expectUnavailable(-1)},
		// The stall (2 s) must end before the older write's deadline.
		{name: "slow-body", topo: single, workers: 4, upstreamTimeout: 5 * time.Second, inject: slowBody, judge: judgeSlowBody, fields: slowBodyFields},
		{name: "slow-upstream", topo: single, upstreamTimeout: 5 * time.Second, inject: slowUpstream, hold: holdOneIn(holdEvery, holdMin, holdMax), fields: slowUpstreamFields, judge: judgeSlowUpstream},
		{name: "sentinel-failover", topo: sentinelWait, inject: failover, expect: expectUnavailable(-1), fields: lostFields},
		// A Redis Cluster shard's master SIGKILLed mid-load, its replica
		// promoted, the killed node back as its replica; the other shards
		// serve throughout.
		{name: "cluster-failover", topo: redisCluster, inject: clusterFailover, judge: judgeCluster, expect: expectCluster, fields: clusterFields},
		// A shard's replica and master SIGKILLed: no failover possible; its
		// resources refused (fail closed), the others served, until it
		// comes back on its files.
		{name: "cluster-shard-kill", topo: redisCluster, inject: clusterShardKill, judge: judgeShardKill, expect: expectShardKill, fields: shardKillFields},
		{name: "sentinel-failover-nowait", measure: true, topo: sentinelNoWait, inject: failover, fields: lostHealedFields, healed: true},
		// Three etcd members; the leader SIGKILLed mid-load, a new one
		// elected, the killed member restarted on its data.
		{name: "etcd-leader-kill", topo: etcdCluster, inject: etcdLeaderKill, expect: expectEtcdKill, fields: etcdKillFields},
		{name: "load", topo: single, workers: p.loadWorkers, inject: steadyLoad, measures: loadMeasures},
		// The same load without the barrier: what it buys.
		{name: "load-drain-off", topo: single, drainOff: true, workers: p.loadWorkers, inject: steadyLoad, fields: drainOffFields},
		{name: "drain-wake", topo: single, noLoad: true, inject: drainWake, judge: judgeDrainWake, fields: drainWakeFields, measures: drainWakeMeasures},
		// Order under ordinary life: clients that give up before the
		// service has finished, a locale, a stepped store clock, many
		// waiters, a failover with the barrier on.
		{name: "client-gives-up", topo: single, loadCfg: giveUpLoad, inject: clientGivesUp, expect: expectGaveUp, fields: gaveUpFields},
		{name: "locale", topo: single, redisEnv: localeEnv, inject: localeTrials, judge: judgeTrials, expect: expectCollation, fields: trialFields},
		{name: "clock-step", topo: single, redisEnv: clockEnv, inject: clockSteps, judge: judgeClockStep, fields: clockStepFields},
		{name: "herd", topo: single, noLoad: true, noReader: true, inject: herd, judge: judgeHerd, fields: herdFields},
		{name: "failover-barrier", topo: sentinelTwo, upstreamTimeout: failoverBarrierUpTime, inject: failoverBarrier, judge: judgeResume, fields: resumeFields},
		// The same after both replicas were cut off for a second, with a
		// production's down-after-milliseconds: releases acknowledged
		// before a slow failover, which the promoted replica lacks.
		{name: "failover-slow-cut", topo: sentinelTwo, upstreamTimeout: failoverBarrierUpTime, downAfter: 6 * time.Second, replCut: time.Second,
			inject: failoverBarrier, judge: judgeResume, fields: resumeFields},
		// The store goes back to an older copy of itself (same identity):
		// refused store-lost by every replica until the runbook's recovery.
		{name: "redis-restore", topo: single, inject: restoreScenario(redisRestore), expect: expectRestore, fields: restoreFields},
		{name: "lagging-failover", topo: sentinelNoWait, cold: true, inject: restoreScenario(laggingFailover), expect: expectRestore, fields: restoreFields},
		{name: "etcd-restore", topo: etcdCluster, inject: restoreScenario(etcdRestore), expect: expectRestore, fields: restoreFields},
		// A bolt file copied back from a backup, under the one process that
		// uses it; with its generation file too, the documented limit.
		{name: "bolt-restore", topo: boltFiles, replicas: 1, noLoad: true, inject: boltRestore, expect: expectBoltRestore,
			fields: boltRestoreFields, measures: boltRestoreMeasures},
	}
}

// runScenario sets up, runs the load and the injections, checks the history
// and tears everything down.
func runScenario(ctx context.Context, h *Harness, sc *scenario, p params, opts Options) Result {
	t0 := time.Now()
	res := Result{Name: sc.name, Measure: sc.measure, DrainOff: sc.drainOff}
	e := &env{h: h, p: p, opts: opts, sc: sc, clock: clock{start: time.Now()}, healed: -1}
	defer e.teardown()
	finish := func(ops []check.Op) Result {
		res.Duration = time.Since(t0).Round(100 * time.Millisecond)
		res.Line = e.line(&res, ops)
		if sc.measures != nil && ops != nil {
			res.Measures = sc.measures(e, ops, &res.Report)
		}
		return res
	}
	if err := e.setup(); err != nil {
		res.Problems = append(res.Problems, "setup: "+err.Error())
		return finish(nil)
	}

	if sc.hold != nil {
		e.up.hold, e.up.holdBudget = sc.hold, e.upstreamTimeout()
	}
	workers := sc.workers
	switch {
	case sc.noLoad:
		workers = 0
	case workers == 0:
		workers = p.workers
	}
	cfg := loadConfig{Workers: workers, Resources: p.resources, PGreater: 0.2}
	if opts.Break == "bypass" {
		cfg.Bypass = 0.05
	}
	if sc.loadCfg != nil {
		sc.loadCfg(e, &cfg)
	}
	e.ld = newLoad(cfg, e.clock, e.proxies, e.up.URL(), sc.name)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.ld.run(loadCtx)
	}()
	if e.rd != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.rd.run(loadCtx, 100*time.Millisecond)
		}()
	}
	injErr := sc.inject(ctx, e)
	stopLoad()
	wg.Wait()
	if injErr != nil {
		res.Problems = append(res.Problems, "injection: "+injErr.Error())
	}
	// The final read: every mark the run established must still be there.
	if _, err := e.readNow(10 * time.Second); err != nil {
		res.Problems = append(res.Problems, "final read: "+err.Error())
	}
	// How admitted requests passed the barrier, as the replicas running
	// now counted them (a restarted replica counts from its restart).
	if !e.drainOff() {
		if d, err := e.drainMetrics(); err == nil {
			e.note("drain_waited=%.0f drain_expired=%.0f drain_timeout=%.0f",
				d.outcomes["waited"], d.outcomes["expired"], d.outcomes["timeout"])
		}
	}

	if sc.healed {
		if v, err := e.healedMarks(); err == nil {
			e.healed = v
		} else {
			res.Problems = append(res.Problems, "healed: "+err.Error())
		}
	}

	ops := e.ld.history()
	e.mu.Lock()
	ops = append(ops, e.extra...)
	e.mu.Unlock()
	if e.rd != nil {
		ops = append(ops, e.rd.history()...)
	}
	ops = e.dropLossReads(ops)
	timeout := p.checkTimeout
	if sc.measure {
		// A history known to be unsafe: proving it non-linearizable can
		// take porcupine long, and its figures are the measurement.
		timeout = min(timeout, 5*time.Second)
	}
	res.Report = check.Check(ops, e.up.Forwards(), timeout)
	// A mark the store lost is a regression too: read from what it held
	// after the fault, lower than a token admitted before.
	if n, tok := e.lostMarks(ops); n > 0 {
		res.Report.Regressions += n
		res.Report.Examples = append(res.Report.Examples,
			fmt.Sprintf("regression: %d marks lost across the fault (%d tokens in all)", n, tok))
	}
	// With the drain barrier (every scenario but the drain-off measurement;
	// the "nodrain" control turns it off and keeps this on) the order
	// figures are safety figures.
	res.InversionsFatal = !sc.drainOff
	res.Order = res.Report.Inversions + res.Report.Overlaps
	if sc.judge != nil {
		sc.judge(e, ops, &res)
	}
	res.Violations = append(res.Violations, e.probeViolations...)
	if injErr == nil {
		if sc.expect != nil {
			res.Problems = append(res.Problems, sc.expect(e, ops)...)
		}
		res.Problems = append(res.Problems, e.probeProblems...)
		res.Problems = append(res.Problems, e.expectRecovered(ops)...)
	}
	return finish(ops)
}

// expectRecovered fails a scenario in which nothing was admitted after the
// last fault ended: safety figures of a system that refuses everything
// prove nothing.
//
// A measure whose fault lost writes (a failover without WAIT), or a broken
// system's control, may instead end with the store lost: the replicas found it gone back in time and
// refuse it (503 store-lost) until an operator recovers it, which is the
// safe ending, not a system that refuses everything for no reason.
func (e *env) expectRecovered(ops []check.Op) []string {
	n := count(ops, func(o *check.Op) bool { return o.Outcome == check.Admitted && o.Call > e.recovered })
	if n > 0 {
		return nil
	}
	lost := count(ops, func(o *check.Op) bool { return o.Problem == problemStoreLost && o.Call > e.recovered })
	if (e.sc.measure || e.opts.Break != "") && lost > 0 {
		return nil
	}
	return []string{"nothing was admitted after the last fault ended"}
}

// expectUnavailable: the fault must have shown, as 503s or failed requests
// inside its windows, or the scenario tested nothing.
func expectUnavailable(replica int) func(e *env, ops []check.Op) []string {
	return func(e *env, ops []check.Op) []string {
		n := count(ops, func(o *check.Op) bool {
			return (o.Outcome == check.Unavailable || o.Outcome == check.Failed) &&
				(e.inWindow(o.Call, replica) || e.inWindow(o.Return, replica))
		})
		if n == 0 {
			return []string{"the fault had no visible effect (no 503 or failed request while it lasted)"}
		}
		return nil
	}
}

// expectOtherServes: while replica 1 was down or frozen, replica 0 kept
// admitting; and the fault hit replica 1 (failed requests if killed,
// requests it held through the pause, answered only after SIGCONT, if
// paused).
func expectOtherServes(killed bool) func(e *env, ops []check.Op) []string {
	return func(e *env, ops []check.Op) []string {
		var out []string
		served := count(ops, func(o *check.Op) bool {
			return o.Replica == 0 && o.Outcome == check.Admitted && e.inWindow(o.Call, 1) && e.inWindow(o.Return, 1)
		})
		if served == 0 {
			out = append(out, "replica 0 admitted nothing while replica 1 was down")
		}
		hit := count(ops, func(o *check.Op) bool {
			if o.Replica != 1 {
				return false
			}
			if killed {
				return o.Outcome == check.Failed && (e.inWindow(o.Call, 1) || e.inWindow(o.Return, 1))
			}
			// Held through the pause: sent before its end (before the
			// pause too: all the workers that pick replica 1 can be
			// waiting on it when it freezes) and answered after it.
			return e.heldThrough(o)
		})
		if hit == 0 {
			out = append(out, "the fault did not hit replica 1's requests")
		}
		return out
	}
}

func lostFields(e *env, ops []check.Op, _ *check.Report) []string {
	n, tok := e.lostMarks(ops)
	return []string{fmt.Sprintf("lost_marks=%d lost_tokens=%d", n, tok)}
}

// pausedFields: what happened to the requests that replica 1 held while
// frozen: in flight when the pause began, or sent to it during the pause,
// and answered after it. paused_504: answered 504, their upstream deadline
// passed while it was frozen (what it had not sent, it did not send).
func pausedFields(e *env, ops []check.Op, _ *check.Report) []string {
	var held, admitted, stale, unavailable, timedOut int
	for i := range ops {
		o := &ops[i]
		if o.Replica != 1 || !e.heldThrough(o) {
			continue
		}
		held++
		switch o.Outcome {
		case check.Admitted:
			admitted++
			if o.Status == 504 {
				timedOut++
			}
		case check.Stale:
			stale++
		case check.Unavailable:
			unavailable++
		}
	}
	return append([]string{fmt.Sprintf("paused_held=%d paused_admitted=%d paused_504=%d paused_stale=%d paused_unavailable=%d",
		held, admitted, timedOut, stale, unavailable)}, probeFields(e)...)
}

// killedFields: the expiry probes of proxy-kill.
func killedFields(e *env, _ []check.Op, _ *check.Report) []string { return probeFields(e) }

// heldThrough reports whether o was called before the end of a fault
// window on its replica and returned after it.
func (e *env) heldThrough(o *check.Op) bool {
	for _, w := range e.windows {
		if (w.replica < 0 || w.replica == o.Replica) && o.Call <= w.end && o.Return > w.end {
			return true
		}
	}
	return false
}

// line formats the scenario's one output line: the six fixed fields first.
func (e *env) line(res *Result, ops []check.Op) string {
	r := &res.Report
	kind := "scenario"
	if res.Measure || res.DrainOff {
		kind = "measure"
	}
	f := []string{
		fmt.Sprintf("%s=%s ops=%d stale_admissions=%d unfenced_forwards=%d regressions=%d unavailable=%d",
			kind, res.Name, r.Ops, r.StaleAdmissions, r.UnfencedForwards, r.Regressions, r.Unavailable),
		fmt.Sprintf("stale_below_admitted=%d admitted=%d stale=%d failed=%d reads=%d missing_forwards=%d late_forwards=%d inversions=%d overlaps=%d duplicate_forwards=%d",
			r.StaleBelowAdmitted, r.Admitted, r.Stale, r.Failed, r.Reads, r.MissingForwards, r.LateForwards, r.Inversions, r.Overlaps, r.DuplicateForwards),
		fmt.Sprintf("linearizable=%s checked_ops=%d injections=%d", strings.ToLower(string(r.Linearizable)), r.CheckedOps, e.injections),
	}
	if e.sc.fields != nil && ops != nil {
		f = append(f, e.sc.fields(e, ops, r)...)
	}
	f = append(f, e.notes...)
	if e.opts.Break != "" {
		f = append(f, "break="+e.opts.Break)
	}
	verdict := "pass"
	if res.Failed() {
		verdict = "FAIL"
		if len(res.Problems) > 0 {
			verdict = "ERROR"
		}
	}
	f = append(f, "duration="+res.Duration.String(), "verdict="+verdict)
	return strings.Join(f, " ")
}
