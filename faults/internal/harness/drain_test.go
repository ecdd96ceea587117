package harness

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// An exposition as fenceproxy's admin /metrics writes it: two routes.
const drainExposition = `# HELP fenceproxy_drain_total Admitted requests at the drain barrier by route and outcome.
# TYPE fenceproxy_drain_total counter
fenceproxy_drain_total{outcome="expired",route="ge"} 1
fenceproxy_drain_total{outcome="none",route="ge"} 90
fenceproxy_drain_total{outcome="none",route="gt"} 10
fenceproxy_drain_total{outcome="timeout",route="gt"} 2
fenceproxy_drain_total{outcome="waited",route="ge"} 6
fenceproxy_drain_total{outcome="waited",route="gt"} 4
# TYPE fenceproxy_drain_wait_seconds histogram
fenceproxy_drain_wait_seconds_bucket{route="ge",le="0.001"} 0
fenceproxy_drain_wait_seconds_bucket{route="ge",le="0.005"} 4
fenceproxy_drain_wait_seconds_bucket{route="ge",le="0.01"} 6
fenceproxy_drain_wait_seconds_bucket{route="ge",le="+Inf"} 7
fenceproxy_drain_wait_seconds_sum{route="ge"} 1.05
fenceproxy_drain_wait_seconds_count{route="ge"} 7
fenceproxy_drain_wait_seconds_bucket{route="gt",le="0.001"} 0
fenceproxy_drain_wait_seconds_bucket{route="gt",le="0.005"} 2
fenceproxy_drain_wait_seconds_bucket{route="gt",le="0.01"} 3
fenceproxy_drain_wait_seconds_bucket{route="gt",le="+Inf"} 3
fenceproxy_drain_wait_seconds_sum{route="gt"} 0.015
fenceproxy_drain_wait_seconds_count{route="gt"} 3
fenceproxy_requests_total{decision="admitted",route="ge"} 96
`

func TestParseDrain(t *testing.T) {
	s, err := parseDrain(drainExposition)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"none": 100, "waited": 10, "expired": 1, "timeout": 2}
	for k, v := range want {
		if s.outcomes[k] != v {
			t.Errorf("outcome %s = %v, want %v", k, s.outcomes[k], v)
		}
	}
	if s.count != 10 || s.sum != 1.065 || s.buckets[0.005] != 6 {
		t.Fatalf("count %v sum %v buckets %v", s.count, s.sum, s.buckets)
	}
	// 10 waits: 6 up to 5 ms, 9 up to 10 ms, one above. The median (rank
	// 5) lies in (1 ms, 5 ms]: 1 + 4*5/6 ms; p90 (rank 9) is 10 ms; p99
	// (rank 9.9) in +Inf: the greatest finite bound.
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, time.Millisecond + 4*time.Millisecond*5/6}, {0.9, 10 * time.Millisecond}, {0.99, 10 * time.Millisecond}} {
		got, ok := s.quantile(c.q)
		if !ok || (got-c.want).Abs() > time.Microsecond {
			t.Errorf("quantile(%v) = %v, %v; want %v", c.q, got, ok, c.want)
		}
	}
	// The difference of two samples: nothing happened in between.
	d := s.add(s, -1)
	if _, ok := d.quantile(0.5); ok || d.outcomes["waited"] != 0 {
		t.Fatalf("difference: %+v", d)
	}
	if f := drainFields(d); f != "none=0 waited=0 expired=0 timeout=0" {
		t.Fatalf("fields of nothing: %q", f)
	}
	f := drainFields(s)
	if !strings.HasPrefix(f, "none=100 waited=10 expired=1 timeout=2 wait_mean=106.5ms wait_p50~4.333ms wait_p99~10ms") {
		t.Fatalf("fields: %q", f)
	}
	if _, err := parseDrain("fenceproxy_drain_total{outcome=\"none\"} x\n"); err == nil {
		t.Fatal("a malformed value parsed")
	}
}

func TestLabel(t *testing.T) {
	for _, c := range []struct{ set, name, want string }{
		{`{outcome="waited",route="ge"}`, "outcome", "waited"},
		{`{outcome="waited",route="ge"}`, "route", "ge"},
		{`{route="ge",le="+Inf"}`, "le", "+Inf"},
		{`{xle="1",le="2"}`, "le", ""}, // the first match is inside another name
		{`{route="ge"}`, "le", ""},
	} {
		if got := label(c.set, c.name); got != c.want {
			t.Errorf("label(%s, %s) = %q, want %q", c.set, c.name, got, c.want)
		}
	}
}

// A drain-wake trial as the upstream may have seen it.
func wakeCase(i int, oldEnd, newBegin int64, waited, early bool) (wakeTrial, []check.Forward) {
	res := "wake-" + strconv.Itoa(i)
	t := wakeTrial{
		old:    check.Op{ID: res + "-old", Resource: res, Token: 5, Status: 200, Outcome: check.Admitted},
		nw:     check.Op{ID: res + "-newer", Resource: res, Token: 6, Status: 200, Outcome: check.Admitted},
		waited: waited, early: early,
	}
	return t, []check.Forward{
		{ID: t.old.ID, Resource: res, Token: 5, At: 1, End: oldEnd},
		{ID: t.nw.ID, Resource: res, Token: 6, At: newBegin, End: newBegin + 1},
	}
}

func TestDrainWake(t *testing.T) {
	ms := int64(time.Millisecond)
	var trials []wakeTrial
	var fwd []check.Forward
	for i, c := range []struct {
		oldEnd, newBegin int64
		waited, early    bool
	}{
		{100 * ms, 103 * ms, true, false},
		{100 * ms, 102 * ms, true, false},
		{100 * ms, 110 * ms, true, false},
		{100 * ms, 101 * ms, false, false}, // did not wait: left out
	} {
		tr, f := wakeCase(i, c.oldEnd, c.newBegin, c.waited, c.early)
		trials = append(trials, tr)
		fwd = append(fwd, f...)
	}
	e := &env{sc: &scenario{name: "drain-wake"}, up: &Upstream{recs: fwd}, wake: trials}
	d, notWaited := e.wakes()
	if len(d) != 3 || notWaited != 1 || d[0] != 2*time.Millisecond || d[2] != 10*time.Millisecond {
		t.Fatalf("wakes %v, not waited %d", d, notWaited)
	}
	var res Result
	judgeDrainWake(e, nil, &res)
	if len(res.Problems) != 0 || len(res.Violations) != 0 {
		t.Fatalf("problems %q violations %q", res.Problems, res.Violations)
	}
	m := strings.Join(drainWakeMeasures(e, nil, nil), " ")
	if !strings.Contains(m, "measure=drain-wake replicas=2 trials=3 wake_min=2ms wake_p50=3ms wake_p90=10ms wake_p99=10ms wake_max=10ms wake_mean=5ms") {
		t.Fatalf("measure line %q", m)
	}
	if f := strings.Join(drainWakeFields(e, nil, nil), " "); f != "trials=4 waited=3 not_waited=1" {
		t.Fatalf("fields %q", f)
	}

	// The newer request reached the upstream while the older one was held:
	// a violation.
	tr, f := wakeCase(9, 100*ms, 50*ms, true, true)
	e = &env{sc: &scenario{name: "drain-wake"}, up: &Upstream{recs: f}, wake: []wakeTrial{tr}}
	res = Result{}
	judgeDrainWake(e, nil, &res)
	if len(res.Violations) != 1 {
		t.Fatalf("violations %q", res.Violations)
	}
	if r := check.CountOrder(f); r.Overlaps != 1 {
		t.Fatalf("the order count missed it: %+v", r)
	}
}

// The slow upstream cuts a hold that would outlast the proxy's deadline,
// a gated request is held until released, and one the client gives up on
// is recorded as abandoned.
func TestUpstreamHoldAndGate(t *testing.T) {
	up, err := startUpstream(clock{start: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer up.close()
	up.hold = func() time.Duration { return 2 * time.Second }
	up.holdBudget = holdMargin + 100*time.Millisecond
	post := func(ctx context.Context, id string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, up.URL()+"/ge/r", strings.NewReader("w"))
		req.Header.Set(RequestIDHeader, id)
		req.Header.Set("Fencing-Token", "7")
		req.Header.Set(sentAtHeader, strconv.FormatInt(up.clock.now(), 10))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	t0 := time.Now()
	if err := post(context.Background(), "cut"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second || up.Cut() != 1 || up.Held() != 1 {
		t.Fatalf("held %v (held %d, cut %d), want about 100ms", d, up.Held(), up.Cut())
	}
	up.hold = nil

	release := up.gate("gated")
	done := make(chan error, 1)
	go func() { done <- post(context.Background(), "gated") }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the gated request was answered before its release: %v", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f, ok := up.Forward("gated"); !ok || f.End == 0 || f.Abandoned {
		t.Fatalf("gated: %+v", f)
	}

	up.gate("left")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := post(ctx, "left"); err == nil {
		t.Fatal("the abandoned request was answered")
	}
	for t0 := time.Now(); time.Since(t0) < 2*time.Second; time.Sleep(10 * time.Millisecond) {
		if f, _ := up.Forward("left"); f.End != 0 {
			if !f.Abandoned {
				t.Fatalf("left: %+v", f)
			}
			return
		}
	}
	t.Fatal("the upstream never saw the client leave")
}

// The expiry probe's judgement: neither the newer nor the later request may
// reach the upstream while the older one is in flight on the frozen or
// killed replica (before its deadline, or, frozen, before it relayed its
// answer); the newer one is answered 200 (while the frozen replica is still
// frozen) or 504 at its own deadline, and the later one 200.
func TestExpiryProbe(t *testing.T) {
	ms := int64(time.Millisecond)
	closed := make(chan struct{})
	close(closed)
	probe := func(oldReturn, newBegin int64) (*env, *expiryProbe) {
		p := &expiryProbe{
			old:     check.Op{ID: "old", Resource: "expiry-0", Token: 5, Call: 100 * ms, Return: oldReturn, Status: 200},
			nw:      check.Op{ID: "newer", Resource: "expiry-0", Token: 6, Call: 600 * ms, Return: newBegin + ms, Status: 200, Outcome: check.Admitted},
			later:   check.Op{ID: "later", Resource: "expiry-0", Token: 7, Call: 2900 * ms, Return: 2902 * ms, Status: 200, Outcome: check.Admitted},
			release: func() {}, begun: true, oldDone: closed, nwDone: closed,
		}
		e := &env{sc: &scenario{name: "proxy-pause", upstreamTimeout: time.Second}, up: &Upstream{recs: []check.Forward{
			{ID: "old", Resource: "expiry-0", Token: 5, At: 101 * ms, End: 102 * ms},
			{ID: "newer", Resource: "expiry-0", Token: 6, At: newBegin, End: newBegin + 1},
			{ID: "later", Resource: "expiry-0", Token: 7, At: 2901 * ms, End: 2901*ms + 1},
		}}}
		return e, p
	}
	for _, c := range []struct {
		name                 string
		frozen               bool
		oldReturn, newBegin  int64
		problems, violations int
	}{
		{"frozen: passed at the deadline", true, 2100 * ms, 1101 * ms, 0, 0},
		{"frozen: passed while it was in flight", true, 2100 * ms, 602 * ms, 0, 1},
		{"frozen: passed after it was answered (not frozen after all)", true, 300 * ms, 602 * ms, 0, 0},
		{"frozen: answered only after the resume", true, 2100 * ms, 2200 * ms, 1, 0},
		{"killed: passed at the deadline", false, 150 * ms, 1101 * ms, 0, 0},
		{"killed: passed while its entry was in flight", false, 150 * ms, 602 * ms, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, p := probe(c.oldReturn, c.newBegin)
			problems := e.finish(p, 2000*ms, c.frozen)
			if len(problems) != c.problems || len(e.probeViolations) != c.violations {
				t.Fatalf("problems %q, violations %q", problems, e.probeViolations)
			}
		})
	}
	// The newer request answered 504 at its own deadline (it watched the
	// older one past it): no problem while the later one is answered 200.
	e, p := probe(2100*ms, 1101*ms)
	p.nw.Status, p.nw.Outcome = 504, check.Admitted
	if problems := e.finish(p, 2000*ms, true); len(problems) != 0 {
		t.Fatalf("a 504 for the newer request: problems %q", problems)
	}
	// The later request still held (answered 504): the replica held the
	// resource past the bound.
	e, p = probe(2100*ms, 1101*ms)
	p.later.Status = 504
	if problems := e.finish(p, 2000*ms, true); len(problems) != 1 {
		t.Fatalf("a 504 for the later request: problems %q", problems)
	}
	// The later request reaching the upstream while the older one was in
	// flight is a violation too.
	e, p = probe(150*ms, 1101*ms)
	e.up.recs[2].At = 700 * ms
	if e.finish(p, 2000*ms, false); len(e.probeViolations) != 1 {
		t.Fatalf("the later request early: violations %q", e.probeViolations)
	}
}
