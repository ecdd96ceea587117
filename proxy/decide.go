package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// verdict is what fencing decided for one request: the proxy forwards or
// refuses it, the authorization mode answers it.
type verdict struct {
	rt  *route
	dec decision // admitted, unfenced, or the refusal's decision
	pr  *problem // the refusal's answer; nil when the request may go on
	// extra are log fields of a refusal beyond the problem's (the store's
	// error, the path as sent).
	extra    []zap.Field
	canon    string // the canonical path the upstream receives
	trailing bool   // the path as sent ended in a slash
	// An admitted request's admission: when it began (the upstream
	// deadline counts from there), what was asked, what the store said.
	start time.Time
	a     fencestore.Admission
	d     fencestore.Decision
	// span is the admission's span (trace.go); nil when tracing is off,
	// the request is not sampled, or nothing was asked of the store.
	span trace.Span
}

// refused sets v's refusal k with its detail and returns v.
func (v *verdict) refused(k refusal, detail string) *verdict {
	v.pr = problemFor(k, detail)
	v.pr.Route = v.rt.name
	v.dec = answers[k].decision
	return v
}

// decide fences r under the route table tab, in the order of the request's
// way through fenceproxy: canonical path, route, token (and sequence, on a
// route with one), resource, body (read whole first), admission. Only the
// admission has an effect (it moves the mark); decide forwards nothing and
// writes nothing.
//
// In authorization mode (authz) no body is read (the asking proxy sends
// none) and no in-flight record is taken for the drain barrier: fenceproxy
// never sees the request reach the upstream, nor its response end.
//
// v is the caller's (so that it can live on the caller's stack); decide
// fills it and returns it.
func (p *Proxy) decide(v *verdict, tab *router, r *http.Request, authz bool) *verdict {
	v.rt = tab.fallback
	if targetHasFragment(r) {
		return v.refused(refFragment, errTargetFragment.Error())
	}
	// One walk of the header map tells whether any name is spelled with
	// '_' (a twin of a header the fence reads); the common request has none
	// and is not walked again for each set of names.
	twins := hasUnderscoreName(r.Header)
	// Headers only fenceproxy may set, or that frameworks read as the path:
	// stripped on the way to the upstream; in the authorization mode, where
	// the asking proxy forwards what it was sent, refused.
	if authz {
		if h := reservedHeaderOf(r.Header, twins); h != "" {
			return v.refused(refReservedHeader, "the request carries "+h+", a header a client must not send: only fenceproxy "+
				"sets Fence-Decision and Fence-Problem, and frameworks read X-Original-URL and X-Rewrite-URL as the path, so the "+
				"app could act on another request than the one decided on")
		}
	} else {
		stripReserved(r.Header, twins)
	}
	if twins {
		if h := underscoreTwin(r.Header, p.overrideHeaders); h != "" {
			return v.refused(refMethodOverride, "the request carries "+quoteShort(h)+", which CGI-style frameworks read as a "+
				"method override header: send it with '-', not '_'")
		}
	}
	escaped := r.URL.EscapedPath()
	canon, trailing, err := CanonicalPath(escaped)
	if err != nil {
		v.extra = []zap.Field{zap.String("path", escaped)}
		return v.refused(refAmbiguousPath, err.Error())
	}
	v.canon, v.trailing = canon, trailing
	override, err := methodOverride(r, p.overrideHeaders)
	if err != nil {
		return v.refused(refMethodOverride, err.Error())
	}
	method := r.Method
	rt, rctx := tab.match(method, canon)
	if override != "" && override != method {
		// The app applies the override if it honours overrides, and acts on
		// the request's own method if it does not: fence the override's
		// method when that is fenced, else the request's own when that is.
		ort, orctx := tab.match(override, canon)
		if ort.fences(override) || !rt.fences(method) {
			tab.release(rctx)
			rt, rctx, method = ort, orctx, override
		} else {
			tab.release(orctx)
		}
	}
	defer tab.release(rctx)
	v.rt = rt

	if !rt.fences(method) {
		// The request's own method, also under an override to an unfenced
		// one: "put" with X-HTTP-Method-Override: GET reaches an app that
		// ignores overrides as a PUT once upper-cased.
		if p.fencedOnceUpperCased(tab, r.Method, canon) {
			return v.refused(refMethodCase, "the method is not in upper case, and in upper case it is fenced on this path "+
				"(many frameworks upper-case it): send it in upper case with a fencing token")
		}
		v.dec = decUnfenced
		return v
	}
	if authz && !spelledCanonically(escaped, canon, trailing) {
		// The asking proxy passes the path on as it was sent, and the
		// service may read another spelling differently from the canonical
		// path fenced here: in the proxy mode the service receives the
		// canonical path, here only a canonical spelling can be trusted.
		return v.refused(refNotCanonical, "the path is not in canonical form ("+strconv.Quote(canon)+
			"): in the authorization mode the service receives the path as sent, so only its canonical spelling is fenced")
	}
	if name := nonCanonicalUint(rt, rctx); name != "" {
		return v.refused(refAmbiguousNumber, "path parameter {"+name+"} must be a canonical unsigned integer "+
			"(digits only, no sign, no leading zero): another spelling of the same number would escape its mark")
	}

	token, signed, err := p.tokenOf(r.Header[p.tokenHeader])
	var seq uint64
	var hasSeq bool
	if err == nil && rt.sequence != config.SequenceOff {
		seq, hasSeq, err = p.sequenceOf(r, rt)
	}
	if err == nil {
		err = p.checkConnection(r, rt)
	}
	if err == nil && twins {
		if h := underscoreTwin(r.Header, rt.connHeaders); h != "" {
			err = &underscoreError{header: h}
		}
	}
	if err != nil {
		var te *TokenError
		var se *SequenceError
		var ie *fencejwt.Error
		switch {
		case errors.Is(err, ErrTokenAbsent) && rt.tokenOptional:
			v.dec = decUnfenced
			return v
		case errors.Is(err, ErrTokenAbsent):
			return v.refused(refTokenRequired, "this route is fenced: send the lease's token in the "+p.tokenHeader+" header")
		case errors.As(err, &ie):
			return v.refused(refTokenInvalid, p.tokenHeader+": "+err.Error())
		case errors.As(err, &te):
			return v.refused(refTokenMalformed, p.tokenHeader+": "+err.Error())
		case errors.Is(err, ErrSequenceAbsent):
			v.refused(refSequenceRequired, "this route orders the requests of one lease: send the request's sequence in the "+
				p.sequenceHeader+" header")
			v.pr.Token = formatUint(token)
			return v
		case errors.As(err, &se):
			v.refused(refSequenceMalformed, p.sequenceHeader+": "+err.Error())
			v.pr.Token = formatUint(token)
			return v
		default: // the Connection header names a template header
			return v.refused(refHopByHop, err.Error())
		}
	}
	// Every later refusal knows the token and the sequence.
	refused := func(k refusal, detail, resource string) *verdict {
		v.refused(k, detail)
		v.pr.Resource, v.pr.Token, v.pr.Sequence = resource, formatUint(token), formatIf(seq, hasSeq)
		return v
	}

	var query url.Values
	if needsQuery(&rt.resource) {
		if query, err = url.ParseQuery(r.URL.RawQuery); err != nil {
			v.refused(refQueryMalformed, "the query string is malformed and names the resource: "+err.Error())
			return v
		}
	}
	var nameBuf [128]byte
	name, err := fillResource(nameBuf[:0], &rt.resource, r, rctx, query)
	if err != nil {
		return refused(refResourceUnnamed, err.Error(), "")
	}
	// Only admitted names are kept: a client that invents names (refused,
	// or never admitted) must not grow the cache.
	resource, interned := rt.names.lookup(name)
	if p.tokens != nil && !signed.Covers(resource) {
		v.refused(refWrongResource, "the signed token is valid for "+strconv.Quote(signed.Resource)+" only (its res claim)")
		v.pr.Resource, v.pr.Token = resource, formatUint(token)
		return v
	}

	if !authz {
		if err := readBodyFirst(r); err != nil {
			k := refBodyIncomplete
			if err == errBodyTimeout {
				k = refBodyTimeout
			}
			return refused(k, err.Error()+"; it was not admitted and nothing was forwarded", resource)
		}
	}

	a := fencestore.Admission{Resource: resource, Token: token, Sequence: seq, HasSequence: hasSeq, Compare: rt.compare}
	if rt.drain && !authz {
		a.Flight = p.upstreamTimeout
	}
	if p.marks != nil {
		a.Floor, a.FloorGeneration, a.HasFloor = p.marks.get(resource)
	}
	start := time.Now()
	v.span = p.startAdmit(r, rt, resource, token, seq, hasSeq)
	d, err := p.store.Admit(p.deadlines.context(start), a)
	elapsed := time.Since(start)
	m := rt.metrics
	if err == nil && p.marks != nil {
		seen := fencestore.Mark{Token: d.Mark, Sequence: d.Sequence, HasSequence: d.HasSequence}
		if d.Admitted {
			p.marks.admitted(resource, seen, d.Generation, d.FloorVoid)
		} else {
			p.marks.refused(resource, seen, d.Generation, d.FloorVoid)
		}
		if d.Regressed {
			m.regressions.Inc()
			p.log.Warn("the store's mark was below the one this replica saw: raised back to it (lost in a crash, a flush or a failover)",
				requestFields(r, zap.String("route", rt.name), zap.String("resource", resource),
					zap.String("remembered", string(a.Floor.AppendValue(nil))), zap.String("token", formatUint(token)))...)
		}
	}

	switch {
	case err != nil:
		m.unavailable.Observe(elapsed.Seconds())
		k := refStoreUnavailable
		if errors.Is(err, fencestore.ErrStoreLost) {
			k = refStoreLost
		}
		v.extra = []zap.Field{zap.Error(err)}
		return refused(k, p.unavailableDetail(err), resource)
	case !d.Admitted:
		m.stale.Observe(elapsed.Seconds())
		k := refStale
		if d.StaleSequence(a) {
			k = refStaleSequence
		}
		pr := refused(k, "", resource).pr
		pr.HighWaterMark, pr.HighWaterSequence = formatUint(d.Mark), formatIf(d.Sequence, d.HasSequence)
		if k == refStale {
			pr.Detail = "token " + pr.Token + " is older than the resource's high-water mark " + pr.HighWaterMark +
				": a newer lease holder has written"
		} else {
			pr.Detail = "sequence " + pr.Sequence + " of token " + pr.Token + " is not above the resource's high-water sequence " +
				pr.HighWaterSequence + " for that token: a later request of this lease was admitted first, or this one was already admitted"
		}
		return v
	}
	m.admitted.Observe(elapsed.Seconds())
	if !interned {
		rt.names.add(resource)
	}
	if ce := p.log.Check(zapcore.DebugLevel, "admitted"); ce != nil {
		// token and mark are strings in every log line, as in the
		// problem bodies: JSON numbers lose precision past 2^53.
		fields := []zap.Field{zap.String("route", rt.name), zap.String("resource", resource),
			zap.String("token", formatUint(token)), zap.String("mark", formatUint(d.Mark)), zap.Duration("duration", elapsed)}
		if hasSeq {
			fields = append(fields, zap.String("sequence", formatUint(seq)), zap.String("highWaterSequence", formatUint(d.Sequence)))
		}
		ce.Write(requestFields(r, fields...)...)
	}
	v.dec, v.start, v.a, v.d = decAdmitted, start, a, d
	return v
}
