package proxy

import (
	"context"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The last step of an admitted request: the drain barrier, then the forward
// under the request's upstream deadline.
//
// Admission orders generations, but a request admitted with token 41 just
// before 42 was admitted can still reach (or still be running in) the
// upstream after 42's request. So every admitted request on a route with the
// barrier is in flight, in the store, from its admission until fenceproxy's
// own exchange with the upstream has ended (the response read to its end,
// whether or not the client is still there to receive it; the exchange
// failed) or its upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission)
// passed; and a request sends no byte upstream while a request for its
// resource ordered before it (a lower token, or on a route with a sequence a
// lower pair) is in flight. A waiter treats an older request as abandoned
// once it has watched it, on its own monotonic clock, for the older one's
// bound plus fencestore.AbandonMargin; a replica that resumes past its
// request's deadline sends nothing more of it (sendBy below), so nothing it
// sends can come after what a waiter let through.

// errPastDeadline refuses a write to the upstream that would start after the
// request's upstream deadline: it wraps context.DeadlineExceeded, so the
// answer is 504.
var errPastDeadline = &deadlineError{}

type deadlineError struct{}

func (*deadlineError) Error() string {
	return "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT) passed: nothing more is sent"
}
func (*deadlineError) Unwrap() error { return context.DeadlineExceeded }

// pastDeadline reports whether ctx's deadline has passed by the clock, not
// by its timer: a process that was frozen resumes with timers that have not
// fired yet, and must not send what it had not sent.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// forwardAdmitted forwards a request admitted by v. v.start is when its
// admission began: the upstream deadline counts from there, which is never
// later than the store registered it in flight, so no waiter stops watching
// it before it has stopped sending. bodyBy is the deadline of reading its body
// from the client (zero: none). The admission's span ends once the request
// has passed the barrier (or been refused there).
func (p *Proxy) forwardAdmitted(w http.ResponseWriter, r *http.Request, v *verdict, bodyBy time.Time) {
	deadline := v.start.Add(p.upstreamTimeout)
	f := v.d.Flight
	if !f.Registered() {
		ctx, cancel := context.WithDeadline(r.Context(), deadline)
		defer cancel()
		v.endAdmit()
		p.sendAdmitted(w, r.WithContext(ctx), v)
		return
	}
	// In flight, the exchange with the upstream is fenceproxy's own: a
	// client that times out or disconnects must not cut it short, or the
	// release would let a newer request through while the upstream still
	// works on this one (exchange.go).
	client := r.Context()
	var ctx context.Context
	if d := p.flights.take(v.start); d != nil {
		ctx = d
		defer d.done()
	} else {
		// Of Background, not of the client: the exchange below answers
		// with the client's values itself, so they are looked up once.
		c, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		ctx = c
	}
	// The exchange carries the client's values (a shared deadline has
	// none) to the barrier's watch too.
	x := &exchange{Context: ctx, client: client}
	if !p.passBarrier(x, w, r, v, f, bodyBy) {
		// passBarrier has answered and seen to the release.
		v.endAdmit()
		return
	}
	v.endAdmit()
	// Released when the exchange is over, whichever way: the response read
	// to its end (relayed or not), the exchange failed, or the deadline cut
	// it. A deferred call, so that it runs on ReverseProxy's
	// http.ErrAbortHandler panic too.
	defer p.store.Release(f)
	defer x.end(v.rt.metrics)
	if client.Err() != nil {
		// Gone before anything was sent: nobody is waiting for this
		// write, so it is not started.
		w.WriteHeader(499)
		return
	}
	p.sendAdmitted(w, r.WithContext(x), v)
}

// sendAdmitted forwards r, whose context carries its upstream deadline.
func (p *Proxy) sendAdmitted(w http.ResponseWriter, r *http.Request, v *verdict) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &sendByBody{ReadCloser: r.Body, ctx: r.Context()}
	}
	p.serveForward(w, r, v.rt, v.canon, v.trailing)
}

// watchBound bounds one watch at the barrier: twice the longest an older
// request of this replica can be in flight, plus fencestore.AbandonMargin.
// The slack covers a store whose fallback poll notices an abandoned request
// late, and replicas whose FENCE_UPSTREAM_TIMEOUT is longer (up to twice);
// a watch that reaches it ends as if the request's own deadline had.
func (p *Proxy) watchBound() time.Duration {
	return 2*p.upstreamTimeout + fencestore.AbandonMargin
}

// drained is what one Drain returned.
type drained struct {
	expired bool
	err     error
}

// passBarrier waits until no request older than f is in flight, and reports
// whether the request may go on. When it may not, it has answered (503
// drain-timeout after FENCE_DRAIN_TIMEOUT, 504 when the request's own
// upstream deadline passed, 503 store-unavailable when the store failed, 499
// when the client left) and has seen to f's release.
//
// The watch of the older requests is not cut short by any of these: it runs
// on, after the answer, until they end or have been watched long enough to
// count as abandoned (fencestore.AbandonMargin), and only then is f
// released. A waiter's own deadline always comes before it could see an
// abandoned request through (the older one's bound is as long as its own,
// and watched from the waiter's admission on), so were the watch cut with
// the answer, no waiter would ever see a dead replica's request to its end
// and its resource would stay blocked.
func (p *Proxy) passBarrier(ctx context.Context, w http.ResponseWriter, r *http.Request, v *verdict, f fencestore.Flight, bodyBy time.Time) bool {
	rt, a := v.rt, &v.a
	m := rt.metrics
	if !f.Older {
		m.drain[drainNone].Inc()
		traceDrain(v.span, drainNone, 0, false)
		return true
	}
	// Time spent here is not the client's: FENCE_BODY_TIMEOUT stops while
	// the request waits.
	resumeBody := pauseBody(w, r, bodyBy)
	defer resumeBody()

	watch, stopWatch := context.WithTimeout(context.WithoutCancel(ctx), p.watchBound())
	done := make(chan drained, 1)
	start := time.Now()
	go func() {
		expired, err := p.store.Drain(watch, f)
		done <- drained{expired, err}
	}()
	var timeout <-chan time.Time
	if p.drainTimeout > 0 {
		t := time.NewTimer(p.drainTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var (
		d                           drained
		watching                    = true
		clientGone, ownDeadline, tm bool
	)
	select {
	case d = <-done:
		watching = false
	case <-r.Context().Done():
		clientGone = true
	case <-ctx.Done():
		ownDeadline = true
	case <-timeout:
		tm = true
	}
	waited := time.Since(start)
	m.drainWait.Observe(waited.Seconds())
	// stop ends the watch. A request that goes on stops it at once (it
	// holds f until its exchange ends). One that gave up lets it run to its
	// end in the background and releases f then.
	stop := func(release bool) {
		switch {
		case !release:
			stopWatch()
			if watching {
				<-done
			}
		case watching:
			go func() {
				<-done
				stopWatch()
				p.store.Release(f)
			}()
		default:
			stopWatch()
			p.store.Release(f)
		}
	}
	if !watching && d.err != nil && watch.Err() != nil {
		// The watch's bound is longer than the request's own, so that has
		// passed too.
		ownDeadline = true
	}
	var pr *problem
	switch {
	case !watching && d.err == nil && d.expired:
		stop(false)
		m.drain[drainExpired].Inc()
		traceDrain(v.span, drainExpired, waited, true)
		return true
	case !watching && d.err == nil:
		stop(false)
		m.drain[drainWaited].Inc()
		traceDrain(v.span, drainWaited, waited, true)
		return true
	case clientGone:
		// The client left while waiting: nobody reads an answer, and
		// nothing was sent.
		stop(true)
		m.clientGone.Inc()
		w.WriteHeader(499)
		return false
	case ownDeadline:
		// The request's own upstream deadline passed first: a 504, as
		// for any request that did not finish in time.
		m.drain[drainTimeout].Inc()
		traceDrain(v.span, drainTimeout, waited, true)
		pr = problemFor(refDrainDeadline, "the request waited for older requests of this resource until its upstream deadline "+
			"(FENCE_UPSTREAM_TIMEOUT) passed; nothing was forwarded")
	case tm:
		m.drain[drainTimeout].Inc()
		traceDrain(v.span, drainTimeout, waited, true)
		pr = problemFor(refDrainTimeout, "older requests for this resource were still in flight after "+p.drainTimeout.String()+
			" (FENCE_DRAIN_TIMEOUT); nothing was forwarded, and the mark has advanced to this token")
	default:
		pr = problemFor(refStoreUnavailable, "the fence store failed while the request waited for older requests of its resource to end; "+
			"nothing was forwarded (the mark has advanced to this token)")
	}
	pr.Route, pr.Resource, pr.Token, pr.Sequence = rt.name, a.Resource, formatUint(a.Token), formatIf(a.Sequence, a.HasSequence)
	// Admitted, so the mark moved, but held back: the client must know that
	// nothing reached the upstream, whatever the status.
	pr.Forwarded = "false"
	log, dec, fields := p.log, answers[pr.ref].decision, []zap.Field{zap.Duration("waited", waited)}
	if dec == decUnavailable {
		log, fields = p.outageLog, append(fields, zap.Error(d.err))
	}
	if rt.dryRun && ctx.Err() == nil {
		// A dry run forwards what the barrier would have held back (while
		// the request's own deadline has not passed: past it, nothing may
		// be sent at all). It holds f until its exchange ends.
		stop(false)
		pr.Forwarded = ""
		p.logRefusal(log, "would refuse (dry run: forwarded)", r, rt, dec, pr, fields...)
		return true
	}
	stop(true)
	p.logRefusal(log, "refused", r, rt, dec, pr, fields...)
	p.metrics.record(rt, dec, pr)
	p.writeRefusal(w, r, pr)
	return false
}

// pauseBody stops the clock of FENCE_BODY_TIMEOUT on r's body while the
// request waits at the barrier, and returns what restarts it with the time
// that was left. Only a body still to be read from the connection has the
// clock: one read before admission (readBodyFirst) is in memory, and a read
// deadline set then would cut net/http's background read of the idle
// connection.
func pauseBody(w http.ResponseWriter, r *http.Request, bodyBy time.Time) (resume func()) {
	if bodyBy.IsZero() || !hasBody(r) || readsFirst(r) {
		return func() {}
	}
	left := time.Until(bodyBy)
	if left <= 0 {
		return func() {} // already past: the next read fails, as it should
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Time{}) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Now().Add(left)) }
}

// sendByBody is an admitted request's body on its way upstream. The
// transport writes what a read returns right after it, so each read checks
// the upstream deadline by the clock once it has its bytes: a read that
// blocked on the client while the process was frozen returns past the
// deadline, and its bytes are dropped rather than sent.
type sendByBody struct {
	io.ReadCloser
	ctx context.Context
}

func (b *sendByBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if pastDeadline(b.ctx) {
		return 0, errPastDeadline
	}
	return n, err
}
