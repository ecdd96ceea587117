package redislease

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed release.lua
var releaseSource string

var releaseScript = redis.NewScript(releaseSource)

// Release deletes the lease if this owner holds it, so that another owner can
// acquire it at once rather than after the TTL. It returns ErrNotHeld if this
// owner does not hold it, and then deletes nothing: the lease has expired and
// may belong to another owner now. The token counter is never touched, so the
// next holder's token is still greater.
//
// After Release returns nil or ErrNotHeld, Token returns 0 and SignedToken "". A client that
// retries commands on its own may report ErrNotHeld for a release whose first
// attempt succeeded but whose reply was lost.
func (l *Lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redislease: release %q: %w", l.name, err)
	}
	n, err := releaseScript.Run(ctx, l.client, []string{l.key}, l.owner).Int64()
	if err != nil {
		return callError(ctx, "release", l.name, err)
	}
	l.setHolding(0, "", time.Time{})
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	}
	return nil
}
