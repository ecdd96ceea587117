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
//
// Time is measured on the monotonic clock, as an offset from the moment the
// sharedDeadline was made: a wall clock stepped backwards (NTP, a VM resumed)
// must not keep handing out a context whose deadline has passed.
type sharedDeadline struct {
	timeout time.Duration
	epoch   time.Time // with a monotonic reading: time.Now()
	cur     atomic.Pointer[deadlineCtx]
}

type deadlineCtx struct {
	context.Context
	cancel context.CancelFunc // run by the context's own timer at the deadline
	until  time.Duration      // since epoch: requests starting before this take it
}

func newSharedDeadline(timeout time.Duration) *sharedDeadline {
	return &sharedDeadline{timeout: timeout, epoch: time.Now()}
}

// context returns the admission context for a request that started at now,
// a time.Now() reading (Sub then uses the monotonic clock).
func (s *sharedDeadline) context(now time.Time) context.Context {
	n := now.Sub(s.epoch)
	if d := s.cur.Load(); d != nil && n < d.until {
		return d
	}
	// now carries a monotonic reading, and so does the deadline made from
	// it: the context's timer then runs on the monotonic clock too.
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(deadlineGrain+s.timeout))
	d := &deadlineCtx{Context: ctx, cancel: cancel, until: n + deadlineGrain}
	// Another request may have installed one at the same moment; either is
	// correct for both, so the last store wins.
	s.cur.Store(d)
	return d
}
