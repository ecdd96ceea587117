package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/faults/check"
)

// The slow scenarios: what the upstream sees when an older token's write is
// slow on its way (a stalled body) or a request is slow at the upstream.

const (
	// slowStall is how long the older holder stalls mid-body.
	slowStall = 2 * time.Second
	// smallBody is under the proxy's 64 KiB bound on the bodies it reads
	// whole before admission; largeBody is over it (streamed after
	// admission).
	smallBody = 4 << 10
	largeBody = 96 << 10
	// bodyFirstLimit is that bound (proxy/bodyfirst.go, maxBodyFirst).
	bodyFirstLimit = 64 << 10
	// The tokens of a stalled round: the older holder's lease (admitted
	// once before it starts writing) and the newer one's.
	slowOldToken, slowNewToken = 5, 6
)

// slowRound is one stalled write and the newer write that overtakes it.
type slowRound struct {
	round, size   int
	resource      string
	seed, old, nw check.Op
	// headSeen: the upstream had begun the (streamed) older write before
	// the newer one was sent.
	headSeen bool
}

// slowBody: per round, two stalled writes at once on two resources of their
// own, one with a small body (read whole before admission) and one with a
// large one (streamed after admission). Each older holder (token 5, which it
// was admitted with just before) sends the head and half its body through
// replica 0 and stalls for slowStall; meanwhile a newer holder writes token
// 6 through replica 1; then the older one sends the rest and reads its
// answer. A light load runs on the other resources meanwhile.
func slowBody(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup/2); err != nil {
		return err
	}
	for i := range e.p.slowRounds {
		if i > 0 {
			if err := e.sleep(ctx, e.p.gap/2); err != nil {
				return err
			}
		}
		start := e.now()
		var wg sync.WaitGroup
		rounds := make([]slowRound, 2)
		for k, size := range []int{smallBody, largeBody} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rounds[k] = e.slowWrite(i, size)
			}()
		}
		wg.Wait()
		e.mu.Lock()
		e.slow = append(e.slow, rounds...)
		e.mu.Unlock()
		for _, r := range rounds {
			e.addOps(r.seed, r.old, r.nw)
		}
		e.fault(start, -1)
		e.logf("round %d: small body: older write answered %d; large body: older write answered %d",
			i, rounds[0].old.Status, rounds[1].old.Status)
	}
	return e.sleep(ctx, time.Second)
}

// slowWrite runs one stalled write of size bytes and the newer write that
// overtakes it. Every operation it sent is in the returned round (an ID of
// "" for one it never sent).
func (e *env) slowWrite(round, size int) slowRound {
	r := slowRound{round: round, size: size, resource: fmt.Sprintf("slow%dk-%d", size>>10, round)}
	id := func(what string) string { return fmt.Sprintf("%s-%s-%s", e.sc.name, r.resource, what) }
	hc := newClient()
	defer hc.CloseIdleConnections()

	// The older holder's lease: its token admitted once.
	r.seed = check.Op{ID: id("seed"), Client: -2, Replica: 1, Resource: r.resource, Token: slowOldToken}
	e.ld.do(hc, &r.seed)
	if r.seed.Outcome != check.Admitted {
		return r
	}

	// The older holder: the head and half the body, through replica 0.
	r.old = check.Op{ID: id("old"), Client: -3, Replica: 0, Resource: r.resource, Token: slowOldToken}
	body := bytes.Repeat([]byte{'o'}, size)
	head := fmt.Sprintf("POST /ge/%s HTTP/1.1\r\nHost: %s\r\n%s: %d\r\n%s: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
		r.resource, e.proxies[0].DataAddr, client.DefaultHeader, r.old.Token, RequestIDHeader, r.old.ID, size)
	r.old.Call = e.now()
	conn, err := net.DialTimeout("tcp", e.proxies[0].DataAddr, 2*time.Second)
	if err != nil {
		r.old.Return, r.old.Outcome = e.now(), check.Failed
		return r
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(clientTimeout))
	stallEnd := time.Now().Add(slowStall)
	_, err = conn.Write(append([]byte(head), body[:size/2]...))

	// Let the older write settle: streamed, it is admitted at once and its
	// head reaches the upstream; read first, the proxy holds it.
	if size > bodyFirstLimit {
		for t := time.Now(); time.Since(t) < 1500*time.Millisecond; time.Sleep(10 * time.Millisecond) {
			if _, ok := e.up.Forward(r.old.ID); ok {
				r.headSeen = true
				break
			}
		}
	} else {
		time.Sleep(300 * time.Millisecond)
	}

	// The newer holder writes, through the other replica. With the drain
	// barrier a streamed older write is in flight, so the newer one waits
	// for it: it runs beside the rest of the older one.
	r.nw = check.Op{ID: id("newer"), Client: -2, Replica: 1, Resource: r.resource, Token: slowNewToken}
	newerDone := make(chan struct{})
	go func() {
		defer close(newerDone)
		e.ld.do(hc, &r.nw)
	}()

	// The stall ends: the rest of the body, then the answer.
	time.Sleep(time.Until(stallEnd))
	var resp *http.Response
	if err == nil {
		_, err = conn.Write(body[size/2:])
	}
	if err == nil {
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	}
	if err == nil {
		if perr := client.CheckResponse(resp); perr != nil {
			err = perr
		} else {
			_ = resp.Body.Close()
		}
	}
	r.old.Return = e.now()
	setOutcome(&r.old, resp, err)
	<-newerDone
	return r
}

// slowVerdict is what the upstream made of one round.
type slowVerdict struct {
	oldFwd, newFwd     bool
	landedAfterNewer   bool // the older write ended at the upstream after the newer one began
	newerHeld          bool // the newer write is the last one the upstream completed
	problem, violation string
}

func (e *env) slowVerdict(r *slowRound, fwd []check.Forward) slowVerdict {
	var v slowVerdict
	var oldF, newF, last check.Forward
	lastEnd := int64(-1)
	for _, f := range fwd {
		if f.Resource != r.resource {
			continue
		}
		switch f.ID {
		case r.old.ID:
			oldF, v.oldFwd = f, true
		case r.nw.ID:
			newF, v.newFwd = f, true
		}
		if end := endOf(f); end > lastEnd {
			last, lastEnd = f, end
		}
	}
	kind := fmt.Sprintf("%d-byte body, round %d", r.size, r.round)
	switch {
	case r.seed.Outcome != check.Admitted:
		v.problem = fmt.Sprintf("%s: the older holder's lease (token %d) was not admitted (status %d)", kind, r.seed.Token, r.seed.Status)
		return v
	case r.nw.Outcome != check.Admitted || r.nw.Status/100 != 2 || !v.newFwd:
		v.problem = fmt.Sprintf("%s: the newer write (token %d) was not admitted and forwarded (status %d)", kind, r.nw.Token, r.nw.Status)
		return v
	case r.old.Status != 409 && r.old.Status/100 != 2:
		v.problem = fmt.Sprintf("%s: the older write got no 2xx or 409 answer (status %d, %s)", kind, r.old.Status, r.old.Outcome)
		return v
	case r.size > bodyFirstLimit && !r.headSeen:
		v.problem = fmt.Sprintf("%s: the streamed older write had not reached the upstream when the newer one was sent", kind)
		return v
	}
	v.landedAfterNewer = v.oldFwd && endOf(oldF) >= newF.At
	v.newerHeld = last.ID == r.nw.ID
	if v.landedAfterNewer || !v.newerHeld {
		v.violation = fmt.Sprintf("%s: the older write (token %d, answered %d) began at the upstream at %v and landed at %v; the newer one (token %d) began at %v and landed at %v; the upstream's last write is %q",
			kind, r.old.Token, r.old.Status, dur(oldF.At), dur(oldF.End), r.nw.Token, dur(newF.At), dur(newF.End), last.ID)
	}
	return v
}

func endOf(f check.Forward) int64 {
	if f.End == 0 || f.End < f.At {
		return 1<<63 - 1
	}
	return f.End
}

func dur(t int64) time.Duration { return time.Duration(t).Round(time.Microsecond) }

// slowCounts sums the verdicts of the rounds of one body size.
type slowCounts struct {
	rounds, refused, admitted, landedAfter, newerHeld int
	// newerLatency is the newer write's longest time from call to answer
	// (with the barrier, about the rest of the stall for the streamed body).
	newerLatency         time.Duration
	problems, violations []string
}

func (e *env) slowCounts(small bool) slowCounts {
	var c slowCounts
	fwd := e.up.Forwards()
	for i := range e.slow {
		r := &e.slow[i]
		if (r.size <= bodyFirstLimit) != small {
			continue
		}
		c.rounds++
		v := e.slowVerdict(r, fwd)
		if v.problem != "" {
			c.problems = append(c.problems, v.problem)
			continue
		}
		switch {
		case r.old.Status == 409:
			c.refused++
		case r.old.Status/100 == 2:
			c.admitted++
		}
		if v.landedAfterNewer {
			c.landedAfter++
		}
		if v.newerHeld {
			c.newerHeld++
		}
		c.newerLatency = max(c.newerLatency, time.Duration(r.nw.Return-r.nw.Call))
		if v.violation != "" {
			c.violations = append(c.violations, v.violation)
		}
	}
	return c
}

// judgeSlowBody: with the small body read before admission, the older write
// must be refused and the newer one be the last the upstream completes; a
// round where the older write landed after the newer one began, or the
// upstream's last write is not the newer one, is a violation. The large
// (streamed) body is admitted at its headers: there the drain barrier holds
// the newer write until the older one has completed, and the same two
// checks are violations when the proxies run with it (InversionsFatal);
// without it they are measured, in Order.
func judgeSlowBody(e *env, _ []check.Op, res *Result) {
	if len(e.slow) == 0 {
		res.Problems = append(res.Problems, "no stalled write ran")
		return
	}
	small, large := e.slowCounts(true), e.slowCounts(false)
	res.Problems = append(res.Problems, small.problems...)
	res.Problems = append(res.Problems, large.problems...)
	res.Violations = append(res.Violations, small.violations...)
	if res.InversionsFatal {
		res.Violations = append(res.Violations, large.violations...)
		return
	}
	res.Order += len(large.violations)
	for _, v := range large.violations {
		e.logf("(measured, the drain barrier is off) %s", v)
	}
}

func slowBodyFields(e *env, _ []check.Op, _ *check.Report) []string {
	c := e.slowCounts(true)
	l := e.slowCounts(false)
	return []string{fmt.Sprintf("stall=%v small_body=%d small_rounds=%d small_old_refused=%d small_old_landed_after_newer=%d small_newer_held=%d "+
		"large_body=%d large_rounds=%d large_old_admitted=%d large_old_refused=%d large_old_landed_after_newer=%d large_newer_held=%d large_newer_latency=%v",
		slowStall, smallBody, c.rounds, c.refused, c.landedAfter, c.newerHeld,
		largeBody, l.rounds, l.admitted, l.refused, l.landedAfter, l.newerHeld, l.newerLatency.Round(time.Millisecond))}
}

// The slow upstream holds one request in holdEvery for holdMin to holdMax.
const (
	holdEvery = 20
	holdMin   = time.Second
	holdMax   = 2 * time.Second
)

// holdOneIn returns an upstream hold: every nth request is held for a
// random duration in [lo, hi).
func holdOneIn(n int, lo, hi time.Duration) func() time.Duration {
	var c atomic.Int64
	return func() time.Duration {
		if c.Add(1)%int64(n) != 0 {
			return 0
		}
		return lo + rand.N(hi-lo)
	}
}

// slowUpstream: no fault in the proxies or Redis; the upstream holds some
// requests while the load (tokens rising as new leases are granted) runs
// for slowFor.
func slowUpstream(ctx context.Context, e *env) error {
	return e.sleep(ctx, e.p.slowFor)
}

func judgeSlowUpstream(e *env, _ []check.Op, res *Result) {
	if e.up.Held() == 0 {
		res.Problems = append(res.Problems, "the upstream held no request")
	}
}

func slowUpstreamFields(e *env, _ []check.Op, _ *check.Report) []string {
	return []string{fmt.Sprintf("held=%d held_cut=%d hold_every=%d hold=%v-%v upstream_timeout=%v",
		e.up.Held(), e.up.Cut(), holdEvery, holdMin, holdMax, e.upstreamTimeout())}
}
