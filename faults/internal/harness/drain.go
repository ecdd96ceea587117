package harness

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// The drain barrier's own figures: what the proxies count at the barrier
// (fenceproxy_drain_total, fenceproxy_drain_wait_seconds), and the wake a
// newer request sees once an older one completes (drain-wake).

// drainOutcomes are the outcome labels of fenceproxy_drain_total.
var drainOutcomes = []string{"none", "waited", "expired", "timeout"}

// drainSample is one replica's drain metrics (or their sum, or a
// difference), summed over routes.
type drainSample struct {
	outcomes map[string]float64 // by outcome
	// buckets maps each histogram bound ("le", +Inf included) to the
	// cumulative count of waits up to it.
	buckets    map[float64]float64
	count, sum float64
}

// parseDrain reads the drain metrics out of a Prometheus text exposition.
func parseDrain(text string) (drainSample, error) {
	s := drainSample{outcomes: map[string]float64{}, buckets: map[float64]float64{}}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "fenceproxy_drain_") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return s, fmt.Errorf("metrics line %q: %w", line, err)
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
		}
		switch name {
		case "fenceproxy_drain_total":
			s.outcomes[label(labels, "outcome")] += v
		case "fenceproxy_drain_wait_seconds_bucket":
			le := label(labels, "le")
			b, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
			if err != nil {
				return s, fmt.Errorf("metrics line %q: le: %w", line, err)
			}
			s.buckets[b] += v
		case "fenceproxy_drain_wait_seconds_count":
			s.count += v
		case "fenceproxy_drain_wait_seconds_sum":
			s.sum += v
		}
	}
	return s, nil
}

// label returns the value of label name in a {k="v",...} set.
func label(set, name string) string {
	i := strings.Index(set, name+`="`)
	if i < 0 || (i > 0 && set[i-1] != '{' && set[i-1] != ',') {
		return ""
	}
	v := set[i+len(name)+2:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return ""
}

// add returns s + sign*o.
func (s drainSample) add(o drainSample, sign float64) drainSample {
	out := drainSample{outcomes: map[string]float64{}, buckets: map[float64]float64{},
		count: s.count + sign*o.count, sum: s.sum + sign*o.sum}
	for k, v := range s.outcomes {
		out.outcomes[k] += v
	}
	for k, v := range o.outcomes {
		out.outcomes[k] += sign * v
	}
	for k, v := range s.buckets {
		out.buckets[k] += v
	}
	for k, v := range o.buckets {
		out.buckets[k] += sign * v
	}
	return out
}

// quantile estimates the q-quantile of the waits from the cumulative
// buckets, as Prometheus's histogram_quantile does: linear within the
// bucket that holds it (from 0 in the first). ok is false without waits;
// a quantile in the +Inf bucket is the greatest finite bound.
func (s drainSample) quantile(q float64) (time.Duration, bool) {
	bounds := make([]float64, 0, len(s.buckets))
	for b := range s.buckets {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return 0, false
	}
	total := s.buckets[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		c := s.buckets[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return secs(lo), true
			}
			if c == below {
				return secs(b), true
			}
			return secs(lo + (b-lo)*(rank-below)/(c-below)), true
		}
		lo, below = b, c
	}
	return secs(lo), true
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// drainMetrics scrapes every replica's drain metrics and returns their sum.
func (e *env) drainMetrics() (drainSample, error) {
	sum := drainSample{outcomes: map[string]float64{}, buckets: map[float64]float64{}}
	for _, r := range e.proxies {
		s, err := r.drainMetrics()
		if err != nil {
			return sum, err
		}
		sum = sum.add(s, 1)
	}
	return sum, nil
}

func (r *Replica) drainMetrics() (drainSample, error) {
	code, body, err := adminGet(r.AdminAddr, "/metrics")
	if err != nil {
		return drainSample{}, fmt.Errorf("%s /metrics: %w", r.Name, err)
	}
	if code != 200 {
		return drainSample{}, fmt.Errorf("%s /metrics: %d", r.Name, code)
	}
	return parseDrain(body)
}

// drainFields formats a difference of samples: the outcomes at the barrier
// and the waits (mean exact; p50 and p99 interpolated in the histogram's
// buckets).
func drainFields(d drainSample) string {
	f := make([]string, 0, 8)
	for _, o := range drainOutcomes {
		f = append(f, fmt.Sprintf("%s=%.0f", o, d.outcomes[o]))
	}
	if d.count > 0 {
		p50, _ := d.quantile(0.5)
		p99, _ := d.quantile(0.99)
		f = append(f, fmt.Sprintf("wait_mean=%v wait_p50~%v wait_p99~%v", secs(d.sum/d.count).Round(time.Microsecond),
			p50.Round(time.Microsecond), p99.Round(time.Microsecond)))
	}
	return strings.Join(f, " ")
}

// The drain-wake trials.
const (
	// wakeSettle is how long the newer request is given to be admitted and
	// start waiting before the older one is let go.
	wakeSettle = 50 * time.Millisecond
	// wakeBegin bounds the wait for the older request to reach the
	// upstream.
	wakeBegin = time.Second
)

// wakeTrial is one older request held at the upstream and the newer one
// that waits for it at the barrier, through the other replica.
type wakeTrial struct {
	old, nw check.Op
	// waited: the newer request's replica counted it as having waited at
	// the barrier (fenceproxy_drain_total{outcome="waited"} rose by one).
	waited bool
	// early: the newer request reached the upstream while the older one
	// was still held there (the barrier failed; the order figures count it
	// too).
	early   bool
	problem string
}

// drainWake: no load. Per trial, on a resource of its own, the older
// holder's write (token 5) goes through replica i%2 and the upstream holds
// it; once the upstream has begun it, the newer holder (token 6) writes
// through the other replica, is admitted and waits at the barrier. After
// wakeSettle the upstream lets the older write go; the wake is the time
// from its end at the upstream to the newer one's begin there: the older
// answer relayed, its in-flight entry released in Redis, the message to the
// other replica, the newer request sent.
func drainWake(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup/2); err != nil {
		return err
	}
	hc := newClient()
	defer hc.CloseIdleConnections()
	var trials []wakeTrial
	for i := range e.p.wakeTrials {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		trials = append(trials, e.wakeTrial(hc, i))
	}
	e.mu.Lock()
	e.wake = trials
	e.mu.Unlock()
	for _, t := range trials {
		e.addOps(t.old, t.nw)
	}
	return nil
}

func (e *env) wakeTrial(hc *http.Client, i int) wakeTrial {
	res := fmt.Sprintf("wake-%d", i)
	id := func(what string) string { return fmt.Sprintf("%s-%s-%s", e.sc.name, res, what) }
	older, newer := i%2, 1-i%2
	return e.heldTrial(hc, i, wakeTrial{
		old: check.Op{ID: id("old"), Client: -4, Replica: older, Resource: res, Token: slowOldToken},
		nw:  check.Op{ID: id("newer"), Client: -4, Replica: newer, Resource: res, Token: slowNewToken},
	})
}

// heldTrial runs one trial of t's two requests: the older one is held at
// the upstream; once it began there the newer one is sent, and wakeSettle
// later the older one is let go.
func (e *env) heldTrial(hc *http.Client, i int, t wakeTrial) wakeTrial {
	newer := t.nw.Replica
	release := e.up.gate(t.old.ID)
	defer release()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.ld.do(hc, &t.old)
	}()
	begun := false
	for t0 := time.Now(); time.Since(t0) < wakeBegin; time.Sleep(time.Millisecond) {
		if _, ok := e.up.Forward(t.old.ID); ok {
			begun = true
			break
		}
	}
	if !begun {
		release()
		wg.Wait()
		t.problem = fmt.Sprintf("trial %d: the older write did not reach the upstream within %v (status %d)", i, wakeBegin, t.old.Status)
		return t
	}
	before, berr := e.proxies[newer].drainMetrics()
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.ld.do(hc, &t.nw)
	}()
	time.Sleep(wakeSettle)
	if _, ok := e.up.Forward(t.nw.ID); ok {
		t.early = true
	}
	release()
	wg.Wait()
	after, aerr := e.proxies[newer].drainMetrics()
	if berr == nil && aerr == nil {
		t.waited = after.outcomes["waited"]-before.outcomes["waited"] == 1
	}
	if t.old.Status != 200 || t.nw.Status != 200 {
		t.problem = fmt.Sprintf("trial %d: the older write answered %d, the newer %d; want 200 and 200", i, t.old.Status, t.nw.Status)
	}
	return t
}

// wakes returns the wake of every trial whose newer request waited at the
// barrier, and how many did not.
func (e *env) wakes() (d []time.Duration, notWaited int) {
	fwd := map[string]check.Forward{}
	for _, f := range e.up.Forwards() {
		fwd[f.ID] = f
	}
	for _, t := range e.wake {
		o, ok1 := fwd[t.old.ID]
		n, ok2 := fwd[t.nw.ID]
		if t.problem != "" || !ok1 || !ok2 {
			continue
		}
		if !t.waited || t.early {
			notWaited++
			continue
		}
		d = append(d, time.Duration(n.At-o.End))
	}
	slices.Sort(d)
	return d, notWaited
}

// judgeDrainWake: every trial must have run; a newer request that reached
// the upstream while the older one was held is a violation (the order
// figures count it as an overlap too).
func judgeDrainWake(e *env, _ []check.Op, res *Result) {
	if len(e.wake) == 0 {
		res.Problems = append(res.Problems, "no trial ran")
	}
	heldViolations(e.wake, res)
	if d, _ := e.wakes(); len(d) == 0 && len(e.wake) > 0 {
		res.Problems = append(res.Problems, "no trial's newer write waited at the barrier")
	}
}

func drainWakeFields(e *env, _ []check.Op, _ *check.Report) []string {
	d, notWaited := e.wakes()
	return []string{fmt.Sprintf("trials=%d waited=%d not_waited=%d", len(e.wake), len(d), notWaited)}
}

// drainWakeMeasures is the measure=drain-wake line: the wake's quantiles
// over the trials whose newer request waited.
func drainWakeMeasures(e *env, _ []check.Op, _ *check.Report) []string {
	d, _ := e.wakes()
	if len(d) == 0 {
		return nil
	}
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))].Round(time.Microsecond) }
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return []string{fmt.Sprintf("measure=drain-wake replicas=2 trials=%d wake_min=%v wake_p50=%v wake_p90=%v wake_p99=%v wake_max=%v wake_mean=%v",
		len(d), d[0].Round(time.Microsecond), q(0.5), q(0.9), q(0.99), d[len(d)-1].Round(time.Microsecond),
		(sum / time.Duration(len(d))).Round(time.Microsecond))}
}

// expiryProbe tests that a replica that is frozen or killed holds the
// barrier only for a bounded time: an older request (token 5) through
// replica 1, on a resource of its own, is held at the upstream when the
// fault hits replica 1; the upstream then answers it, which the frozen or
// dead replica never relays, so its entry stays in flight; expiryGap later
// a newer request (token 6) goes through replica 0. No replica's clock
// tells how long the older request has been in flight, so the newer one
// watches it, on its own monotonic clock, for the upstream timeout and the
// abandon margin from its own admission (docs/guarantees.md): it is
// answered 200 when the older one is released in time (a frozen replica
// that resumes), else 504 at its own deadline with nothing forwarded. A
// later request (token 7), sent once the newer one's watch has ended, must
// be forwarded and answered 200: the dead or frozen replica holds the
// resource no longer than that. Neither may reach the upstream while the
// older one is in flight.
type expiryProbe struct {
	old, nw, later check.Op
	release        func()
	begun          bool
	// oldDone and nwDone are closed when each request was answered (the
	// later one too, before nwDone); nwDone is nil when the newer one was
	// not sent.
	oldDone, nwDone chan struct{}
}

const expiryGap = 500 * time.Millisecond

// abandonMargin is what a waiter adds to an older request's upstream
// timeout before it treats the request as abandoned (fenceproxy's
// fencestore.AbandonMargin); laterSlack is the later request's distance
// past the newer one's watch.
const (
	abandonMargin = time.Second
	laterSlack    = 300 * time.Millisecond
)

// startExpiryProbe sends the older request and waits until the upstream
// holds it.
func (e *env) startExpiryProbe(round int) *expiryProbe {
	res := fmt.Sprintf("expiry-%d", round)
	id := func(what string) string { return fmt.Sprintf("%s-%s-%s", e.sc.name, res, what) }
	p := &expiryProbe{
		old:     check.Op{ID: id("old"), Client: -5, Replica: 1, Resource: res, Token: slowOldToken},
		nw:      check.Op{ID: id("newer"), Client: -5, Replica: 0, Resource: res, Token: slowNewToken},
		later:   check.Op{ID: id("later"), Client: -5, Replica: 0, Resource: res, Token: slowNewToken + 1},
		oldDone: make(chan struct{}),
	}
	p.release = e.up.gate(p.old.ID)
	go func() {
		defer close(p.oldDone)
		hc := newClient()
		defer hc.CloseIdleConnections()
		e.ld.do(hc, &p.old)
	}()
	for t0 := time.Now(); time.Since(t0) < wakeBegin; time.Sleep(time.Millisecond) {
		if _, ok := e.up.Forward(p.old.ID); ok {
			p.begun = true
			break
		}
	}
	return p
}

// faulted runs once the fault hit replica 1: the upstream answers the older
// request, and expiryGap later the newer one is sent.
func (e *env) faulted(p *expiryProbe) {
	p.release()
	if !p.begun {
		return
	}
	p.nwDone = make(chan struct{})
	go func() {
		defer close(p.nwDone)
		hc := newClient()
		defer hc.CloseIdleConnections()
		time.Sleep(expiryGap)
		sent := time.Now()
		e.ld.do(hc, &p.nw)
		// The newer request's watch ends the upstream timeout and the
		// margin after its admission (after sent): the later one goes then.
		time.Sleep(time.Until(sent.Add(e.upstreamTimeout() + abandonMargin + laterSlack)))
		e.ld.do(hc, &p.later)
	}()
}

// expirySlack allows for the replica's clock against the history's (both
// monotonic, read in different processes) when judging the older request's
// deadline.
const expirySlack = 50 * time.Millisecond

// finish waits for both requests and records them; it returns the problems
// found: the newer request not answered 200 (forwarded once the older
// one's deadline passed) or, with a frozen replica, only after it resumed.
// A newer request that reached the upstream while the older one was still
// in flight (not answered, its deadline, counted from after its call, not
// passed) is a violation of the barrier, recorded in e.probeViolations.
func (e *env) finish(p *expiryProbe, faultEnd int64, frozen bool) []string {
	p.release()
	<-p.oldDone
	if p.nwDone != nil {
		<-p.nwDone
	}
	for _, op := range []check.Op{p.nw, p.later} {
		nf, ok := e.up.Forward(op.ID)
		if !ok || !p.begun {
			continue
		}
		deadline := p.old.Call + int64(e.upstreamTimeout()-expirySlack)
		// A frozen replica's request is in flight until it relays the
		// answer (after SIGCONT); a killed one's until its deadline (its
		// client saw the connection close at the kill).
		answered := frozen && p.old.Return != 0 && nf.At >= p.old.Return
		if nf.At < deadline && !answered {
			e.probeViolations = append(e.probeViolations, fmt.Sprintf(
				"expiry probe %s: the %s request (token %d, replica 0) reached the upstream at %v, while the older one (token %d, replica 1, sent at %v, returned to its client at %v) was in flight on the %s replica, before its deadline (%v after its call)",
				op.Resource, strings.TrimPrefix(op.ID, p.old.ID[:strings.LastIndex(p.old.ID, "-")+1]), op.Token, dur(nf.At), p.old.Token, dur(p.old.Call), dur(p.old.Return),
				map[bool]string{true: "frozen", false: "killed"}[frozen], e.upstreamTimeout()))
		}
	}
	e.addOps(p.old, p.nw, p.later)
	e.mu.Lock()
	e.probes = append(e.probes, *p)
	e.mu.Unlock()
	switch {
	case !p.begun:
		return []string{fmt.Sprintf("expiry probe %s: the older request did not reach the upstream within %v (status %d)",
			p.old.Resource, wakeBegin, p.old.Status)}
	case p.nw.Status != 200 && p.nw.Status != 504:
		return []string{fmt.Sprintf("expiry probe %s: the newer request through replica 0 answered %d (%s), want 200, or 504 at its own deadline",
			p.nw.Resource, p.nw.Status, p.nw.Outcome)}
	case p.later.Status != 200:
		return []string{fmt.Sprintf("expiry probe %s: the later request through replica 0, sent once the newer one's watch had ended, answered %d (%s), want 200: the dead or frozen replica still held the resource",
			p.later.Resource, p.later.Status, p.later.Outcome)}
	case frozen && p.nw.Status == 200 && p.nw.Return > faultEnd:
		return []string{fmt.Sprintf("expiry probe %s: the newer request through replica 0 was answered only after replica 1 resumed: the frozen replica held the barrier past its request's deadline",
			p.nw.Resource)}
	}
	return nil
}

// probeFields reports the probes: how each newer request was answered and
// how long it took, and the later requests' answers.
func probeFields(e *env) []string {
	if len(e.probes) == 0 {
		return nil
	}
	w := make([]string, len(e.probes))
	st := make([]string, len(e.probes))
	nw := make([]string, len(e.probes))
	lt := make([]string, len(e.probes))
	for i, p := range e.probes {
		w[i] = time.Duration(p.nw.Return - p.nw.Call).Round(time.Millisecond).String()
		st[i] = fmt.Sprint(p.old.Status)
		if p.old.Status == 0 {
			st[i] = p.old.Outcome.String()
		}
		nw[i], lt[i] = fmt.Sprint(p.nw.Status), fmt.Sprint(p.later.Status)
	}
	return []string{fmt.Sprintf("expiry_probes=%d expiry_older_answer=%s expiry_newer_latency=%s expiry_newer_answer=%s expiry_later_answer=%s",
		len(e.probes), strings.Join(st, ","), strings.Join(w, ","), strings.Join(nw, ","), strings.Join(lt, ","))}
}
