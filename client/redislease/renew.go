package redislease

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewSource string

var renewScript = redis.NewScript(renewSource)

// Renew extends the lease to a full TTL from now if this owner still holds it,
// and returns ErrNotHeld if it does not: the TTL ran out (and another owner
// may have acquired it), or it was released. A holder should renew well within
// each TTL and stop acting on the resource on ErrNotHeld. Renew keeps the
// token: a renewed holding is the same holding.
//
// On ErrNotHeld, Token returns 0 from then on. On any other error the lease
// may or may not have been extended.
func (l *Lease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redislease: renew %q: %w", l.name, err)
	}
	n, err := renewScript.Run(ctx, l.client, []string{l.key}, l.owner, l.ttlMillis()).Int64()
	if err != nil {
		return callError(ctx, "renew", l.name, err)
	}
	if n == 0 {
		l.setToken(0)
		return fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	}
	return nil
}
