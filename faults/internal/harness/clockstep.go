package harness

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// clock-step: the store's wall clock stepped forward and back by a day, as
// an NTP step or a failover to a host whose clock differs does, while the
// load runs. redis-server runs with a small LD_PRELOAD library (redistest.ClockShim,
// compiled with gcc at the scenario's start) that adds an offset, read
// from a file the harness rewrites, to its wall clock; its monotonic clock
// is left alone.
//
//   - Forward: per round an older write (token 5, a resource of its own)
//     that the service works on for clockWork goes through replica 0; once
//     it began at the upstream the clock steps forward by a day, and
//     clockNewerAfter after it began a newer write (token 6) goes through
//     replica 1. It must not reach the upstream before the older one has
//     ended (an in-flight entry is not abandoned because a clock jumped
//     past its deadline).
//   - Back: the expiry probe of proxy-kill (an older request held at the
//     upstream through replica 1, which is then killed, so that nobody
//     releases it) with the clock stepped back by a day right after the
//     kill. A later request through replica 0, sent once the newer one
//     has watched the dead replica's request for its bound, must be
//     forwarded and answered 200, not held until a deadline the stepped
//     clock puts a day away.

const (
	clockStep = 24 * time.Hour
	// clockWork is how long the service works on the forward round's older
	// write: the newer one is sent well inside it.
	clockWork = 800 * time.Millisecond
	// clockNewerAfter is when, after the older write began at the
	// upstream, the newer one is sent: inside clockWork, and past the
	// "shortdeadline" control's deadline (with room for its release), so
	// that the control's newer write finds the entry gone and overlaps
	// rather than timing out at the barrier beside it.
	clockNewerAfter = 3 * shortDeadline
)

// clockEnv compiles the shim into the scenario's directory, with its
// offset at 0 (the real clock), and returns the environment that loads it
// into redis-server.
func clockEnv(e *env) ([]string, error) {
	dir, err := mkdir(e.h.dir, "clockshim")
	if err != nil {
		return nil, err
	}
	if e.clockShim, err = redistest.BuildClockShim(dir); err != nil {
		return nil, err
	}
	return e.clockShim.Env(), nil
}

// stepClock sets the store's clock offset from the real time.
func (e *env) stepClock(d time.Duration) error {
	if err := e.clockShim.Step(d); err != nil {
		return err
	}
	e.logf("store clock offset %v", d)
	return nil
}

// storeClockOffset reads Redis's TIME against the local clock.
func (e *env) storeClockOffset() (time.Duration, error) {
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t, err := e.rc.Time(cctx).Result()
	if err != nil {
		return 0, err
	}
	return time.Until(t).Round(time.Second), nil
}

// clockRound is the forward round's pair.
type clockRound struct {
	old, nw check.Op
	// offset is the store's clock against the real one when the newer
	// write was sent, as Redis's TIME reported it.
	offset time.Duration
}

func clockSteps(ctx context.Context, e *env) error {
	hc := newClient()
	defer hc.CloseIdleConnections()
	rounds := max(1, e.p.rounds)
	for i := range rounds {
		if err := e.pause(ctx, 2*i); err != nil {
			return err
		}
		start := e.now()
		r, err := e.clockForward(hc, i)
		e.mu.Lock()
		e.clockRounds = append(e.clockRounds, r)
		e.mu.Unlock()
		e.addOps(r.old, r.nw)
		if err != nil {
			return err
		}
		e.fault(start, -1)

		if err := e.pause(ctx, 2*i+1); err != nil {
			return err
		}
		start = e.now()
		probe := e.startExpiryProbe(i)
		pid := e.proxies[1].Pid()
		if err := e.proxies[1].Kill(); err != nil {
			return err
		}
		if err := e.stepClock(-clockStep); err != nil {
			return err
		}
		off, oerr := e.storeClockOffset()
		if oerr != nil || off > -clockStep+time.Minute {
			// The back step is checked as the forward one is: a clock
			// that did not move tests nothing.
			e.probeProblems = append(e.probeProblems, fmt.Sprintf("back step %d: the store's clock was %v from the real one (%v), not stepped back by %v: the probe tested nothing", i, off, oerr, clockStep))
		}
		e.faulted(probe)
		if err := e.sleep(ctx, time.Second); err != nil {
			return err
		}
		if err := e.proxies[1].Restart(); err != nil {
			return err
		}
		problems := e.finish(probe, e.now(), false)
		if probe.begun && probe.nwDone != nil && probe.later.Call != 0 && probe.later.Status != 200 {
			// Still held once the newer request's watch had ended: the
			// stepped clock decided.
			e.probeViolations = append(e.probeViolations, fmt.Sprintf(
				"expiry probe %s: with the store's clock a day behind, the later request answered %d after %v: held past the dead replica's request's bound",
				probe.later.Resource, probe.later.Status, time.Duration(probe.later.Return-probe.later.Call).Round(time.Millisecond)))
		} else {
			e.probeProblems = append(e.probeProblems, problems...)
		}
		if err := e.stepClock(0); err != nil {
			return err
		}
		e.fault(start, -1)
		e.logf("SIGKILL fenceproxy1 pid %d, store clock stepped back (TIME offset %v, %v), restarted", pid, off, oerr)
	}
	return e.sleep(ctx, e.p.cooldown)
}

// clockForward runs one forward round: the older write held by the
// service, the clock stepped forward, the newer write.
func (e *env) clockForward(hc *http.Client, i int) (clockRound, error) {
	res := fmt.Sprintf("clock-%d", i)
	id := func(what string) string { return fmt.Sprintf("%s-%s-%s", e.sc.name, res, what) }
	r := clockRound{
		old: check.Op{ID: id("old"), Client: -7, Replica: 0, Resource: res, Token: slowOldToken},
		nw:  check.Op{ID: id("newer"), Client: -7, Replica: 1, Resource: res, Token: slowNewToken},
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.ld.doWith(hc, &r.old, reqOpts{work: clockWork})
	}()
	defer wg.Wait()
	var begunAt time.Time
	for t0 := time.Now(); time.Since(t0) < wakeBegin; time.Sleep(time.Millisecond) {
		if _, ok := e.up.Forward(r.old.ID); ok {
			begunAt = time.Now()
			break
		}
	}
	if begunAt.IsZero() {
		return r, fmt.Errorf("round %d: the older write did not reach the upstream within %v", i, wakeBegin)
	}
	if err := e.stepClock(clockStep); err != nil {
		return r, err
	}
	r.offset, _ = e.storeClockOffset()
	time.Sleep(time.Until(begunAt.Add(clockNewerAfter)))
	e.ld.do(hc, &r.nw)
	wg.Wait()
	return r, e.stepClock(0)
}

// judgeClockStep: in each forward round the newer write must not have
// begun at the upstream before the older one ended, and the store's clock
// must have been stepped (its TIME a day ahead).
func judgeClockStep(e *env, _ []check.Op, res *Result) {
	if len(e.clockRounds) == 0 {
		res.Problems = append(res.Problems, "no round ran")
	}
	for _, r := range e.clockRounds {
		if r.offset < clockStep-time.Minute {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: the store's clock was %v ahead, not stepped by %v: the scenario tested nothing", r.old.Resource, r.offset, clockStep))
		}
		o, ok1 := e.up.Forward(r.old.ID)
		n, ok2 := e.up.Forward(r.nw.ID)
		switch {
		case !ok1 || r.nw.Status != 200 || !ok2:
			res.Problems = append(res.Problems, fmt.Sprintf("%s: the older write reached the upstream %t, the newer answered %d (want 200)", r.old.Resource, ok1, r.nw.Status))
		case n.At < endOf(o):
			res.Violations = append(res.Violations, fmt.Sprintf("%s: with the store's clock a day ahead, the newer write (token %d) began at the upstream at %v, while the older one (token %d, begun at %v) was still being processed (until %v)",
				r.old.Resource, r.nw.Token, dur(n.At), r.old.Token, dur(o.At), dur(o.End)))
		}
	}
}

func clockStepFields(e *env, _ []check.Op, _ *check.Report) []string {
	var lat []string
	for _, r := range e.clockRounds {
		lat = append(lat, time.Duration(r.nw.Return-r.nw.Call).Round(time.Millisecond).String())
	}
	f := []string{fmt.Sprintf("step=%v forward_rounds=%d forward_newer_latency=%s work=%v", clockStep, len(e.clockRounds), joinOr(lat, "none"), clockWork)}
	return append(f, probeFields(e)...)
}

func joinOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	out := s[0]
	for _, x := range s[1:] {
		out += "," + x
	}
	return out
}
