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
// barrier is in flight, in the store, from its admission until fenceproxy has
// relayed its response, its exchange failed, or its upstream deadline
// (FENCE_UPSTREAM_TIMEOUT, from admission) passed; and a request sends no
// byte upstream while a request for its resource ordered before it (a lower
// token, or on a route with a sequence a lower pair) is in flight. The store
// times the deadline by its own clock, so a replica that died or froze holds
// the barrier no longer than its requests' deadlines; a replica that resumes
// past one sends nothing more of that request (sendBy below).

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
// later than the store's own clock started it. The admission's span ends
// once the request has passed the barrier (or been refused there).
func (p *Proxy) forwardAdmitted(w http.ResponseWriter, r *http.Request, v *verdict) {
	ctx, cancel := context.WithDeadline(r.Context(), v.start.Add(p.upstreamTimeout))
	defer cancel()
	if f := v.d.Flight; f.Registered() {
		// Released when the forward is over, whichever way: the response
		// relayed, the exchange failed, or the handler aborted mid-body.
		defer p.store.Release(f)
		if !p.passBarrier(ctx, w, r, v, f) {
			v.endAdmit()
			return
		}
	}
	v.endAdmit()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &sendByBody{ReadCloser: r.Body, ctx: ctx}
	}
	p.serveForward(w, r.WithContext(ctx), v.rt, v.canon, v.trailing)
}

// passBarrier waits until no request older than f is in flight, and reports
// whether the request may go on. When it may not, it has answered: 503
// drain-timeout after FENCE_DRAIN_TIMEOUT, 504 when the request's own
// upstream deadline passed, 503 store-unavailable when the store failed.
func (p *Proxy) passBarrier(ctx context.Context, w http.ResponseWriter, r *http.Request, v *verdict, f fencestore.Flight) bool {
	rt, a := v.rt, &v.a
	m := rt.metrics
	if !f.Older {
		o := drainNone
		if f.Expired > 0 {
			o = drainExpired
		}
		m.drain[o].Inc()
		traceDrain(v.span, o, 0, false)
		return true
	}
	wctx := ctx
	if p.drainTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, p.drainTimeout)
		defer cancel()
	}
	start := time.Now()
	expired, err := p.store.Drain(wctx, f)
	waited := time.Since(start)
	m.drainWait.Observe(waited.Seconds())
	var pr *problem
	switch {
	case err == nil && expired:
		m.drain[drainExpired].Inc()
		traceDrain(v.span, drainExpired, waited, true)
		return true
	case err == nil:
		m.drain[drainWaited].Inc()
		traceDrain(v.span, drainWaited, waited, true)
		return true
	case r.Context().Err() != nil:
		// The client left while waiting: nobody reads an answer.
		w.WriteHeader(499)
		return false
	case ctx.Err() != nil:
		// The request's own upstream deadline passed first: a 504, as
		// for any request that did not finish in time.
		m.drain[drainTimeout].Inc()
		traceDrain(v.span, drainTimeout, waited, true)
		pr = problemFor(refDrainDeadline, "the request waited for older requests of this resource until its upstream deadline "+
			"(FENCE_UPSTREAM_TIMEOUT) passed; nothing was forwarded")
	case wctx.Err() != nil:
		m.drain[drainTimeout].Inc()
		traceDrain(v.span, drainTimeout, waited, true)
		pr = problemFor(refDrainTimeout, "older requests for this resource were still in flight after "+p.drainTimeout.String()+
			" (FENCE_DRAIN_TIMEOUT); nothing was forwarded, and the mark has advanced to this token")
	default:
		pr = problemFor(refStoreUnavailable, "the fence store failed while the request waited for older requests of its resource to end; "+
			"nothing was forwarded (the mark has advanced to this token)")
	}
	pr.Route, pr.Resource, pr.Token, pr.Sequence = rt.name, a.Resource, formatUint(a.Token), formatIf(a.Sequence, a.HasSequence)
	log, dec, fields := p.log, answers[pr.ref].decision, []zap.Field{zap.Duration("waited", waited)}
	if dec == decUnavailable {
		log, fields = p.outageLog, append(fields, zap.Error(err))
	}
	if rt.dryRun && ctx.Err() == nil {
		// A dry run forwards what the barrier would have held back (while
		// the request's own deadline has not passed: past it, nothing may
		// be sent at all).
		p.logRefusal(log, "would refuse (dry run: forwarded)", r, rt, dec, pr, fields...)
		return true
	}
	p.logRefusal(log, "refused", r, rt, dec, pr, fields...)
	p.metrics.record(rt, dec, pr)
	p.writeRefusal(w, r, pr)
	return false
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
