package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// client-gives-up: clients whose timeouts are shorter than the service's
// processing, at load. A share of the load's requests ask the upstream to
// work on them for giveUpWork, and their clients give up after giveUpAfter
// (their context ends, the connection to the proxy closes). The service
// keeps working on such a write, as services do, so the proxy must keep it
// in flight until its own exchange with the upstream has ended: a newer
// request for the resource that reached the upstream meanwhile is an
// overlap (the order figures, fatal with the barrier).

const (
	giveUpShare = 0.3
	giveUpAfter = 80 * time.Millisecond
	giveUpWork  = 250 * time.Millisecond
	// shortDeadline is the proxies' FENCE_UPSTREAM_TIMEOUT in the
	// "shortdeadline" control: shorter than giveUpWork and clockWork.
	shortDeadline = 100 * time.Millisecond
)

func giveUpLoad(_ *env, c *loadConfig) {
	c.GiveUp, c.GiveUpAfter, c.GiveUpWork = giveUpShare, giveUpAfter, giveUpWork
}

// clientGivesUp runs the load for slowFor after the warmup; the whole of it
// is the fault.
func clientGivesUp(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup); err != nil {
		return err
	}
	start := e.now()
	if err := e.sleep(ctx, e.p.slowFor); err != nil {
		return err
	}
	e.fault(start, -1)
	return e.sleep(ctx, e.p.cooldown)
}

// giveUpCounts: the requests whose client gave up, those the upstream
// still received, and those it saw the proxy give up on too (the proxy
// closed its connection before the service answered: Forward.Abandoned).
func (e *env) giveUpCounts() (gaveUp, received, abandoned int) {
	gaveUp = int(e.ld.gaveUp.Load())
	for _, f := range e.up.Forwards() {
		if _, ok := e.ld.gaveUpIDs.Load(f.ID); ok {
			received++
			if f.Abandoned {
				abandoned++
			}
		}
	}
	return gaveUp, received, abandoned
}

// expectGaveUp: clients did give up on requests the upstream received
// (the fault happened).
func expectGaveUp(e *env, _ []check.Op) []string {
	if g, recv, _ := e.giveUpCounts(); g == 0 || recv == 0 {
		return []string{fmt.Sprintf("no client gave up on a request the upstream received (gave up %d, received %d)", g, recv)}
	}
	return nil
}

// gaveUpFields: gave_up (requests whose client gave up), gave_up_received
// (of those the upstream received), proxy_abandoned (of those, the ones
// the proxy stopped its own exchange for before the service answered) and
// client_gone (fenceproxy_client_gone_total over both replicas).
func gaveUpFields(e *env, _ []check.Op, _ *check.Report) []string {
	g, recv, ab := e.giveUpCounts()
	gone := "n/a"
	var sum float64
	ok := true
	for _, r := range e.proxies {
		v, err := r.metric("fenceproxy_client_gone_total")
		if err != nil {
			ok = false
			break
		}
		sum += v
	}
	if ok {
		gone = fmt.Sprintf("%.0f", sum)
	}
	return []string{fmt.Sprintf("gave_up=%d gave_up_after=%v work=%v gave_up_received=%d proxy_abandoned=%d client_gone=%s upstream_timeout=%v",
		g, giveUpAfter, giveUpWork, recv, ab, gone, e.upstreamTimeout())}
}
