// Package fencejwt is the format of signed fencing tokens: a compact JWS
// (a JWT) whose claims carry the token (fence), its lifetime (exp, nbf) and
// the resources it is valid for (res); the JWK Set that verifies them; and
// the signing the lease service (or `fenceproxy token sign`) does. The
// cryptography is go-jose's; this package decides what is accepted.
//
// The algorithm is fixed by the key, never taken from the token: an
// Ed25519 key verifies EdDSA, a P-256 key ES256, a symmetric key HS256,
// and a JWS that names any other algorithm for the key its kid picks is
// refused before any signature is checked. That closes `none` and the
// algorithm confusion of an HS256 token "signed" with a public key's
// bytes.
package fencejwt

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

// The algorithms, one per kind of key.
var algorithms = []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256, jose.HS256}

// minHMACKey is the least size of an HS256 key, in bytes: RFC 7518 §3.2
// wants a key at least as long as the hash output.
const minHMACKey = 32

// algorithmOf is the one algorithm key k may sign or verify with, and
// whether k is a secret (a private or symmetric key).
func algorithmOf(k any) (alg jose.SignatureAlgorithm, secret bool, err error) {
	switch k := k.(type) {
	case ed25519.PublicKey:
		return jose.EdDSA, false, nil
	case ed25519.PrivateKey:
		return jose.EdDSA, true, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", false, fmt.Errorf("EC curve %s: only P-256 (ES256) is accepted", k.Curve.Params().Name)
		}
		return jose.ES256, false, nil
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", false, fmt.Errorf("EC curve %s: only P-256 (ES256) is accepted", k.Curve.Params().Name)
		}
		return jose.ES256, true, nil
	case []byte:
		if len(k) < minHMACKey {
			return "", false, fmt.Errorf("a symmetric key of %d bytes: HS256 needs at least %d", len(k), minHMACKey)
		}
		return jose.HS256, true, nil
	}
	return "", false, fmt.Errorf("key type %T: only OKP Ed25519 (EdDSA), EC P-256 (ES256) and oct (HS256) are accepted", k)
}

// key is one verification key of a KeySet.
type key struct {
	alg jose.SignatureAlgorithm
	key any
}

// KeySet holds the keys that verify tokens, by kid. It is immutable.
type KeySet struct {
	keys map[string]key
}

// EmptyKeySet is a key set with no key: every token is refused. It is what
// an emptied ({"keys":[]}) or removed keys file puts in force.
func EmptyKeySet() *KeySet { return &KeySet{keys: map[string]key{}} }

// Len is how many keys the set holds.
func (s *KeySet) Len() int { return len(s.keys) }

// KIDs are the keys' ids.
func (s *KeySet) KIDs() []string {
	out := make([]string, 0, len(s.keys))
	for kid := range s.keys {
		out = append(out, kid)
	}
	return out
}

// ParseKeySet reads a JWK Set (RFC 7517 §5: {"keys": [...]}) strictly:
// every key has a kid, unique in the set; its type is one of the three
// above; a key with "alg" names that key's algorithm, and one with "use"
// says "sig"; an asymmetric key is public (the verifier never needs a
// private one, and finding one here means it was shipped to the wrong
// place). Every problem is reported, each naming its key. A set with no
// keys ({"keys":[]}) is valid and verifies nothing: that is how every key is
// revoked at once.
func ParseKeySet(data []byte) (*KeySet, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	if raw.Keys == nil {
		return nil, errors.New(`not a JWK Set: no "keys" array`)
	}
	if len(raw.Keys) == 0 {
		// Revocation: an operator who empties the file after a leak means
		// "trust no key", and gets exactly that (every token refused).
		return EmptyKeySet(), nil
	}
	set := &KeySet{keys: make(map[string]key, len(raw.Keys))}
	var problems []error
	for i, r := range raw.Keys {
		kid, k, err := parseKey(r)
		if err != nil {
			name := fmt.Sprintf("key %d", i)
			if kid != "" {
				name += fmt.Sprintf(" (kid %q)", kid)
			}
			problems = append(problems, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if _, dup := set.keys[kid]; dup {
			problems = append(problems, fmt.Errorf("key %d: kid %q appears twice", i, kid))
			continue
		}
		set.keys[kid] = k
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return set, nil
}

func parseKey(r json.RawMessage) (string, key, error) {
	var head struct {
		KID string `json:"kid"`
		Use string `json:"use"`
	}
	_ = json.Unmarshal(r, &head) // the full parse below reports a bad object
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(r); err != nil {
		return head.KID, key{}, fmt.Errorf("not a JWK: %w", trimJose(err))
	}
	switch {
	case jwk.KeyID == "":
		return "", key{}, errors.New(`no "kid": tokens choose their key by kid`)
	case head.Use != "" && head.Use != "sig":
		return jwk.KeyID, key{}, fmt.Errorf(`"use" is %q, not "sig"`, head.Use)
	}
	alg, secret, err := algorithmOf(jwk.Key)
	if err != nil {
		return jwk.KeyID, key{}, err
	}
	if secret && alg != jose.HS256 {
		return jwk.KeyID, key{}, errors.New("a private key: the keys file holds public keys only (publish the public JWK Set that `fenceproxy token keygen` writes)")
	}
	if jwk.Algorithm != "" && jwk.Algorithm != string(alg) {
		return jwk.KeyID, key{}, fmt.Errorf(`"alg" is %q, but the key is for %s`, jwk.Algorithm, alg)
	}
	return jwk.KeyID, key{alg: alg, key: jwk.Key}, nil
}

// trimJose drops go-jose's package prefix from an error's text.
func trimJose(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "go-jose/go-jose: "); ok {
		return errors.New(s)
	}
	return err
}
