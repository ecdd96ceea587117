package fencejwt

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Signer mints signed tokens with one private (or symmetric) key.
type Signer struct {
	kid    string
	signer jose.Signer
}

// ParseSigningKey reads a private JWK (or a symmetric one), as
// `fenceproxy token keygen` writes it: with a kid, of one of the three
// kinds.
func ParseSigningKey(data []byte) (*Signer, error) {
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("not a JWK: %w", trimJose(err))
	}
	return NewSigner(jwk)
}

// NewSigner returns a Signer for jwk, a private or symmetric key with a
// kid.
func NewSigner(jwk jose.JSONWebKey) (*Signer, error) {
	if jwk.KeyID == "" {
		return nil, errors.New(`the key has no "kid": the verifier chooses keys by kid`)
	}
	alg, secret, err := algorithmOf(jwk.Key)
	if err != nil {
		return nil, err
	}
	if !secret {
		return nil, errors.New("a public key cannot sign: give the private JWK that `fenceproxy token keygen` wrote")
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jwk.Key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), jwk.KeyID))
	if err != nil {
		return nil, trimJose(err)
	}
	return &Signer{kid: jwk.KeyID, signer: s}, nil
}

// KID is the id of the signer's key.
func (s *Signer) KID() string { return s.kid }

// claimsJSON is the payload as signed: fence in a string, dates in whole
// seconds.
type claimsJSON struct {
	Fence string `json:"fence"`
	Exp   int64  `json:"exp"`
	Nbf   int64  `json:"nbf,omitempty"`
	Res   string `json:"res,omitempty"`
}

// Sign mints a compact JWS of c. c.Expiry is required; it is rounded up
// to a whole second, c.NotBefore down.
func (s *Signer) Sign(c Claims) (string, error) {
	if c.Expiry.IsZero() {
		return "", errors.New("a signed token must expire: Expiry is zero")
	}
	p := claimsJSON{Fence: strconv.FormatUint(c.Fence, 10), Exp: ceilUnix(c.Expiry), Res: c.Resource}
	if !c.NotBefore.IsZero() {
		p.Nbf = c.NotBefore.Unix()
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	jws, err := s.signer.Sign(payload)
	if err != nil {
		return "", trimJose(err)
	}
	return jws.CompactSerialize()
}

func ceilUnix(t time.Time) int64 {
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

// Kinds of key NewKey makes, by their algorithm.
const (
	KindEdDSA = "EdDSA"
	KindES256 = "ES256"
	KindHS256 = "HS256"
)

// NewKey makes a key of kind with kid, and returns the private JWK (for
// the lease service) and the JWK Set the proxies verify with: the public
// key, or for HS256 the same secret (a symmetric key verifies and signs
// alike, so the set is as secret as the key).
func NewKey(kind, kid string) (private []byte, set []byte, err error) {
	if kid == "" {
		return nil, nil, errors.New("a key needs a kid")
	}
	var priv, pub any
	switch kind {
	case KindEdDSA:
		p, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		pub, priv = p, k
	case KindES256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		pub, priv = &k.PublicKey, k
	case KindHS256:
		k := make([]byte, minHMACKey)
		if _, err := rand.Read(k); err != nil {
			return nil, nil, err
		}
		pub, priv = k, k
	default:
		return nil, nil, fmt.Errorf("unknown kind %q: EdDSA, ES256 or HS256", kind)
	}
	alg := kind
	private, err = json.MarshalIndent(jose.JSONWebKey{Key: priv, KeyID: kid, Algorithm: alg, Use: "sig"}, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	set, err = json.MarshalIndent(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: kid, Algorithm: alg, Use: "sig"}}}, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	return append(private, '\n'), append(set, '\n'), nil
}
