package proxy

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlineGrain is how long one admission deadline is handed out.
const deadlineGrain = time.Millisecond

// sharedDeadline bounds admissions by the store timeout without a context
// per request. Every request that starts within the same millisecond shares
// one context.WithDeadline, whose deadline is the end of that millisecond
// plus the timeout: each admission gets at least the timeout and at most
// one millisecond more. Under load that is one context (and one timer) per
// millisecond instead of one per request, with its parent-cancel hook and
// Done channel; when idle it is the same one context a request would make.
//
// The admission context does not inherit the request's cancellation: a
// client that leaves mid-admission does not abort it. That changes nothing a
// client could see (it is gone), and the store's work is bounded by the
// timeout either way.
type sharedDeadline struct {
	timeout time.Duration
	cur     atomic.Pointer[deadlineCtx]
}

type deadlineCtx struct {
	context.Context
	cancel context.CancelFunc // run by the context's own timer at the deadline
	until  int64              // UnixNano: requests starting before this take it
}

// context returns the admission context for a request that started at now.
func (s *sharedDeadline) context(now time.Time) context.Context {
	n := now.UnixNano()
	if d := s.cur.Load(); d != nil && n < d.until {
		return d
	}
	until := now.Add(deadlineGrain)
	ctx, cancel := context.WithDeadline(context.Background(), until.Add(s.timeout))
	d := &deadlineCtx{Context: ctx, cancel: cancel, until: until.UnixNano()}
	// Another request may have installed one at the same moment; either is
	// correct for both, so the last store wins.
	s.cur.Store(d)
	return d
}
