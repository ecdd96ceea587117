package redislease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed acquire.lua
var acquireSource string

// acquireScript is compiled once, so its SHA-1 (what EVALSHA names) is
// computed once; Run falls back to EVAL when the server does not have it.
var acquireScript = redis.NewScript(acquireSource)

// Acquire tries once to take the lease, and returns the token of the new
// holding: greater than the token of every earlier acquisition of this lease,
// by any owner. If another owner holds the lease it returns ErrHeld at once.
//
// If this owner already holds the lease, Acquire takes it again with a new
// token and a fresh TTL; the old token is from then on older than the lease's
// current one, and a write already admitted with the new token makes the proxy
// refuse the old one. This is deliberate: it is what makes Acquire safe to
// retry after an error whose reply was lost (the lease may have been granted
// with a token the caller never saw), and a token is never reused.
//
// With Options.SigningKey it also mints the holding's signed token (see
// SignedToken).
func (l *Lease) Acquire(ctx context.Context) (uint64, error) {
	if l.name == "" {
		return 0, errors.New("redislease: the lease has no name")
	}
	// A cancelled context fails here, not at whatever point the client
	// notices: nothing is sent.
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("redislease: acquire %q: %w", l.name, err)
	}
	start := time.Now() // the holding is counted from before the grant: its end is never later than Redis's
	reply, err := acquireScript.Run(ctx, l.client, []string{l.key, l.counterKey}, l.owner, l.ttlMillis()).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("%w: %q", ErrHeld, l.name)
	case err != nil:
		// The script may have run and granted the lease before the reply was
		// lost; acquiring again (same owner) mints a new token and is safe.
		return 0, callError(ctx, "acquire", l.name, err)
	}
	token, err := strconv.ParseUint(reply, 10, 64)
	if err != nil {
		// The script checks the counter, so this is not expected; the grant
		// stands in Redis until its TTL, with a token nobody can use.
		return 0, fmt.Errorf("redislease: acquire %q: token %q from %s: %w", l.name, reply, l.counterKey, err)
	}
	signed, exp, err := l.mint(token, start)
	if err != nil {
		// Not expected (the key was checked when parsed). A holding without
		// its signed token is of no use to a caller that needs one, and the
		// old holding's are older than this grant: forget both.
		l.setHolding(0, "", time.Time{})
		return 0, fmt.Errorf("redislease: acquire %q: granted with token %d, but signing it failed (the grant stands until its TTL; Release it): %w",
			l.name, token, err)
	}
	l.setHolding(token, signed, exp)
	return token, nil
}

// AcquireWait calls Acquire every retry interval (DefaultRetry if retry is not
// positive) while another owner holds the lease, until it is acquired, ctx is
// done, or Acquire fails otherwise; it returns the token, or the error, which
// wraps ctx.Err() when ctx ended the wait.
//
// It polls: the lease is taken within about retry of its release or expiry,
// and when several owners wait, none of them is favoured.
func (l *Lease) AcquireWait(ctx context.Context, retry time.Duration) (uint64, error) {
	if retry <= 0 {
		retry = DefaultRetry
	}
	for {
		token, err := l.Acquire(ctx)
		if !errors.Is(err, ErrHeld) {
			return token, err
		}
		timer := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			timer.Stop()
			return 0, fmt.Errorf("redislease: waiting for %q: %w", l.name, ctx.Err())
		case <-timer.C:
		}
	}
}

// callError wraps the error of a call to Redis for operation op on lease
// name. When ctx's deadline cut the call short, the client reports an i/o
// timeout (its connection deadline, set from ctx, can expire a moment before
// the context does); what ended it is ctx, and callers match that, so the
// error then wraps ctx's error too.
func callError(ctx context.Context, op, name string, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("redislease: %s %q: %w: %w", op, name, cerr, err)
	}
	return fmt.Errorf("redislease: %s %q: %w", op, name, err)
}
