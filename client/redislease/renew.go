package redislease

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewSource string

var renewScript = redis.NewScript(renewSource)

// Renew extends the lease to a full TTL from now if this owner still holds it,
// and returns ErrNotHeld if it does not: the TTL ran out (and another owner
// may have acquired it), or it was released. A holder should renew well within
// each TTL and stop acting on the resource on ErrNotHeld. Renew keeps the
// token: a renewed holding is the same holding. With Options.SigningKey it
// mints a new signed token for it, expiring SignGrace after the new TTL (see
// SignedToken); the one before stays valid until its own expiry.
//
// On ErrNotHeld, Token returns 0 and SignedToken "" from then on. On any
// other error the lease may or may not have been extended.
func (l *Lease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redislease: renew %q: %w", l.name, err)
	}
	token, gen := l.holding()
	start := time.Now() // as in Acquire: the extended TTL is counted from before the call
	n, err := renewScript.Run(ctx, l.client, []string{l.key}, l.owner, l.ttlMillis()).Int64()
	if err != nil {
		return callError(ctx, "renew", l.name, err)
	}
	if n == 0 {
		l.setHolding(0, "", time.Time{})
		return fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	}
	if token == 0 {
		// Redis says this owner holds the lease, but this Lease never learnt
		// its token (an Acquire whose reply was lost): nothing to sign.
		return nil
	}
	signed, exp, err := l.mint(token, start)
	if err != nil {
		return fmt.Errorf("redislease: renew %q: renewed, but signing a new token failed (SignedToken is still the one before): %w", l.name, err)
	}
	if signed != "" {
		l.setRenewed(gen, signed, exp)
	}
	return nil
}
