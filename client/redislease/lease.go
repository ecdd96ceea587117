package redislease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	// DefaultPrefix is the key prefix when Options.Prefix is empty. It differs
	// from fenceproxy's FENCE_KEY_PREFIX default ("fence:") so that no
	// resource name can spell a lease's key when both share one Redis.
	DefaultPrefix = "fencelease:"
	// DefaultTTL is the lease's time to live when Options.TTL is not positive.
	DefaultTTL = 10 * time.Second
	// DefaultRetry is AcquireWait's interval between attempts when the one
	// given is not positive.
	DefaultRetry = 100 * time.Millisecond
)

var (
	// ErrHeld is returned by Acquire when another owner holds the lease.
	ErrHeld = errors.New("redislease: lease held by another owner")
	// ErrNotHeld is returned by Renew and Release when this owner does not
	// hold the lease (any more): it expired, and another owner may have
	// acquired it since. A holder that gets it must stop acting on the
	// resource; its token is, or will soon be, refused as stale.
	ErrNotHeld = errors.New("redislease: lease not held by this owner")
)

// Options configures New. The zero value is usable.
type Options struct {
	// Prefix is put before the keys of the lease (see the package doc). If
	// empty, DefaultPrefix.
	Prefix string
	// TTL is how long an acquisition or a renewal holds the lease, rounded up
	// to whole milliseconds. If zero or negative, DefaultTTL.
	TTL time.Duration
	// OwnerID is what the lease key holds while this Lease holds it; Renew
	// and Release act only while it is there. It must differ from the owner
	// id of every other Lease of the same name, or two of them would hold the
	// lease at once. If empty, a random 128-bit value in hex.
	OwnerID string

	// SigningKey, when set, makes every successful Acquire (so AcquireWait
	// too) and Renew also mint a signed token (see SignedToken), for proxies
	// that verify them (FENCE_TOKEN_KEYS_FILE). Its fence is the holding's
	// token; it expires SignGrace after the holding's TTL runs out, counted
	// from just before the call was sent (as the package doc says a holder
	// should count its lease). If nil, no signed token is minted.
	SigningKey *SigningKey
	// SignGrace is how long a signed token stays valid after the TTL it was
	// minted for runs out: room for a write sent just before a renewal to
	// reach the proxy, and for a renewal that comes late. Keep it short:
	// it is how long a leaked token outlives the lease (the proxy's mark
	// still refuses it once a newer holder has written). Negative is zero.
	SignGrace time.Duration
	// SignResource is the res claim of the signed tokens: the resource the
	// proxy accepts them for, or a prefix ending in '*' ("orders/*").
	// Usually the proxy's resource name for what the lease guards. If empty,
	// the tokens are valid for every resource.
	SignResource string
}

// Lease is one owner's handle on a named lease in Redis. Its methods are safe
// for concurrent use, though a holding is normally driven by one goroutine:
// Acquire, then Renew within each TTL, then Release.
type Lease struct {
	client     redis.Scripter
	name       string
	key        string // holds the owner id while held, with the TTL
	counterKey string // the token counter; never expires
	owner      string
	ttl        time.Duration
	signKey    *SigningKey // nil: no signed tokens
	signGrace  time.Duration
	signRes    string

	mu        sync.Mutex
	token     uint64    // of the current holding; 0 when none
	signed    string    // its signed token; "" when none
	signedExp time.Time // when signed expires (before rounding to seconds)
	// gen counts changes of holding, so that a Renew that raced an Acquire
	// or a Release does not store a token minted for the holding before.
	gen uint64
}

// New returns a handle on the lease called name, owned by opts.OwnerID. It
// does not talk to Redis. client may be a single-node, failover, cluster or
// ring client (see the package doc about cluster hash slots).
func New(client redis.UniversalClient, name string, opts Options) *Lease {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	// PX takes whole milliseconds; rounding up keeps a sub-millisecond TTL
	// from becoming 0, which SET refuses.
	ttl = (ttl + time.Millisecond - 1).Truncate(time.Millisecond)
	owner := opts.OwnerID
	if owner == "" {
		owner = randomOwnerID()
	}
	key := prefix + name
	return &Lease{
		client:     client,
		name:       name,
		key:        key,
		counterKey: key + ":token",
		owner:      owner,
		ttl:        ttl,
		signKey:    opts.SigningKey,
		signGrace:  max(opts.SignGrace, 0),
		signRes:    opts.SignResource,
	}
}

// Token returns the token of this Lease's current holding: the one the last
// successful Acquire returned, or 0 when it has not acquired, has released, or
// has learnt from Renew or Release that it lost the lease. It does not ask
// Redis, so a holding whose TTL has run out still reports its token until
// then; that is the case the token exists for, since the proxy refuses it once
// a newer holder has written.
func (l *Lease) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// SignedToken returns the signed token of this Lease's current holding, for
// client.WithSignedToken: the one the last successful Acquire or Renew minted
// (a renewal mints a new one, with a later expiry, for the same token). It is
// "" when the Lease has no Options.SigningKey, and whenever Token returns 0.
// Like Token it does not ask Redis; unlike the plain token it stops working
// at its expiry, SignGrace after the TTL it was minted for, so renew in time.
func (l *Lease) SignedToken() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.signed
}

// setHolding records a new holding (or none: 0, ""), and starts a new
// generation of it.
func (l *Lease) setHolding(t uint64, signed string, exp time.Time) {
	l.mu.Lock()
	l.token, l.signed, l.signedExp = t, signed, exp
	l.gen++
	l.mu.Unlock()
}

// holding is the current token and its generation.
func (l *Lease) holding() (uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token, l.gen
}

// setRenewed stores the signed token a renewal minted, unless the holding
// changed since the renewal began, or a later renewal stored a token that
// lasts longer.
func (l *Lease) setRenewed(gen uint64, signed string, exp time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == gen && !exp.Before(l.signedExp) {
		l.signed, l.signedExp = signed, exp
	}
}

// ttlMillis is the TTL as PX and PEXPIRE take it.
func (l *Lease) ttlMillis() int64 { return l.ttl.Milliseconds() }

func randomOwnerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read aborts the program instead
	return hex.EncodeToString(b[:])
}
