package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// failover-barrier: a Sentinel failover under load with the drain barrier
// on. A master, two replicas, three sentinels, FENCE_REDIS_MIN_REPLICAS=1
// and FENCE_UPSTREAM_TIMEOUT=10s. Mid-load the master is SIGKILLed; the
// sentinels promote a replica and point the other at it. Requests that
// were in flight at the kill had entries whose releases went to the dead
// master: unless a replica sends them again to the new one, every newer
// request for their resources waits until their deadlines, up to 10 s. The
// figure is resume_s: the seconds from the promotion (every sentinel names
// the new master, and it says it is one) until every resource has
// admitted a request sent after it (answered 2xx); the scenario fails past
// resumeTarget. Its control, "noretry", runs proxies that send a release
// once and never again (harness.go).
//
// failover-slow-cut: the same, with a failover as slow as production's
// (down-after-milliseconds 6 s) after both replicas were cut off for a
// second: the requests in flight at the cut had entries the replicas hold,
// and releases the master acknowledged during the cut, which neither
// replica received. The promoted one holds those entries until a replica
// sends the releases again: only releases acknowledged since a little
// before the break began do (the first failure, here the WAITs that fail
// during the cut), and the promotion comes about 8 s after the kill.

const (
	resumeTarget          = 5 * time.Second
	failoverBarrierUpTime = 10 * time.Second
)

func failoverBarrier(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup); err != nil {
		return err
	}
	old := e.master
	start := e.now()
	if e.sc.replCut > 0 {
		// Both replicas cut off: the master acknowledges releases (not
		// admissions: WAIT fails) that neither will have when promoted.
		e.replLink.Disable()
		e.replLink2.Disable()
		if err := e.sleep(ctx, e.sc.replCut); err != nil {
			return err
		}
		e.logf("replication links cut for %v before the kill", e.sc.replCut)
	}
	pid := old.Pid()
	if err := old.Kill(); err != nil {
		return err
	}
	next, err := e.sents.waitNewMaster(old.Addr(), 30*time.Second)
	if err != nil {
		return err
	}
	e.promoted = e.now()
	for _, r := range []*Redis{e.replica, e.replica2} {
		if r != nil && r.Addr() == next {
			e.master = r
		}
	}
	e.logf("SIGKILL master %s pid %d; sentinels named %s after %v", old.Addr(), pid, next, dur(e.promoted-start))
	// The fault is the failover, over at the promotion: what follows is
	// judged by resume_s. Ended after the wait below, a run whose
	// resources resumed late would be judged again by what its load
	// admitted in the moments after the last one resumed (with "noretry",
	// sometimes nothing: every worker waiting behind an entry first seen
	// late), and end ERROR for the failure resume_s reports.
	e.fault(start, -1)
	// Wait until every resource admitted again, for at most the upstream
	// deadline and a few seconds: past that the figure says enough.
	limit := time.Now().Add(failoverBarrierUpTime + 5*time.Second)
	for time.Now().Before(limit) && ctx.Err() == nil {
		if _, missing := e.resume(e.ld.history()); missing == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return e.sleep(ctx, e.p.cooldown)
}

// resume returns, over the load's resources, the longest time from the
// promotion to the first 2xx answer to a request sent after it, and how
// many resources had none.
func (e *env) resume(ops []check.Op) (time.Duration, int) {
	if e.promoted == 0 {
		return 0, e.p.resources
	}
	first := map[string]int64{}
	for i := range ops {
		o := &ops[i]
		if o.Status/100 == 2 && o.Call >= e.promoted {
			if t, ok := first[o.Resource]; !ok || o.Return < t {
				first[o.Resource] = o.Return
			}
		}
	}
	var worst time.Duration
	missing := 0
	for i := range e.p.resources {
		t, ok := first[resourceName(i)]
		if !ok {
			missing++
			continue
		}
		worst = max(worst, time.Duration(t-e.promoted))
	}
	return worst, missing
}

// judgeResume: every resource admitted again within resumeTarget of the
// promotion.
func judgeResume(e *env, ops []check.Op, res *Result) {
	if e.promoted == 0 {
		res.Problems = append(res.Problems, "no promotion")
		return
	}
	worst, missing := e.resume(ops)
	switch {
	case missing > 0:
		res.Violations = append(res.Violations, fmt.Sprintf("failover: %d of %d resources admitted nothing sent after the promotion", missing, e.p.resources))
	case worst > resumeTarget:
		res.Violations = append(res.Violations, fmt.Sprintf("failover: the last resource admitted again %.1f s after the promotion (target %v): held by entries whose releases the failover lost",
			worst.Seconds(), resumeTarget))
	}
}

// resumeFields: resume_s (see failoverBarrier), resources_not_resumed, and
// the 504s the barrier gave while waiting (drain timeouts show in
// drain_timeout).
func resumeFields(e *env, ops []check.Op, r *check.Report) []string {
	worst, missing := e.resume(ops)
	n504 := count(ops, func(o *check.Op) bool { return o.Status == 504 && o.Call >= e.promoted })
	f := []string{fmt.Sprintf("resume_s=%.2f resume_target_s=%.0f resources_not_resumed=%d answered_504_after_promotion=%d upstream_timeout=%v",
		worst.Seconds(), resumeTarget.Seconds(), missing, n504, e.upstreamTimeout())}
	return append(f, lostFields(e, ops, r)...)
}
