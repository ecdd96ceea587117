package redislease

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// SigningKey is a private key a Lease mints signed tokens with (see
// Options.SigningKey). It is safe for concurrent use, and one key can serve
// any number of leases.
type SigningKey struct {
	signer *fencejwt.Signer
}

// ParseSigningKey reads a private JWK as `fenceproxy token keygen` writes it
// (its --private file): an Ed25519 (EdDSA), P-256 (ES256) or symmetric
// (HS256) key with a kid. A public key, or a JWK Set, is refused.
func ParseSigningKey(jwk []byte) (*SigningKey, error) {
	s, err := fencejwt.ParseSigningKey(jwk)
	if err != nil {
		var set struct {
			Keys json.RawMessage `json:"keys"`
		}
		if json.Unmarshal(jwk, &set) == nil && set.Keys != nil {
			// The likeliest mix-up: the two files keygen writes.
			return nil, errors.New("redislease: signing key: a JWK Set (keygen's --public file, for the proxies); the lease needs the private JWK (keygen's --private file)")
		}
		return nil, fmt.Errorf("redislease: signing key: %w", err)
	}
	return &SigningKey{signer: s}, nil
}

// KID is the id of the key, which every token it signs names.
func (k *SigningKey) KID() string { return k.signer.KID() }

// mint signs token for a holding that began (as this Lease counts it) at
// start: it expires when the holding's TTL runs out, plus the grace. It
// returns "" when the Lease has no key.
func (l *Lease) mint(token uint64, start time.Time) (string, time.Time, error) {
	if l.signKey == nil {
		return "", time.Time{}, nil
	}
	exp := start.Add(l.ttl + l.signGrace)
	s, err := l.signKey.signer.Sign(fencejwt.Claims{Fence: token, Expiry: exp, Resource: l.signRes})
	if err != nil {
		return "", time.Time{}, err
	}
	return s, exp, nil
}
