package fencejwt

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// fixedKeys are keys that do not change between runs, so that the corpus
// under testdata/fuzz holds tokens that verify.
func fixedKeys(t testing.TB) (*Signer, *Signer, *KeySet) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed([]byte(strings.Repeat("s", ed25519.SeedSize)))
	secret := []byte(strings.Repeat("k", 32))
	ed, err := NewSigner(jose.JSONWebKey{Key: priv, KeyID: "ed"})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := NewSigner(jose.JSONWebKey{Key: secret, KeyID: "hs"})
	if err != nil {
		t.Fatal(err)
	}
	ks := &KeySet{keys: map[string]key{
		"ed": {alg: jose.EdDSA, key: priv.Public()},
		"hs": {alg: jose.HS256, key: secret},
	}}
	return ed, hs, ks
}

// FuzzParseSignedToken: no header value panics Verify, every refusal is an
// *Error whose reason does not hold the token, and the answer is the same
// twice.
func FuzzParseSignedToken(f *testing.F) {
	ed, hs, ks := fixedKeys(f)
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []Claims{{Fence: 42, Expiry: exp}, {Fence: 0, Expiry: exp, Resource: "orders/*"}, {Fence: 18446744073709551615, Expiry: exp, NotBefore: t0}} {
		f.Add(sign(f, ed, c))
		f.Add(sign(f, hs, c))
	}
	for _, p := range []string{`{"fence":"42","exp":1893456000,"fence":"43"}`, `{"fence":42,"exp":1893456000}`, `{"fence":"007","exp":1893456000}`, `{"fence":"1"}`, `[]`, `{"exp":1e400,"fence":"1"}`} {
		f.Add(signRaw(f, ed, p))
	}
	f.Add("42")
	f.Add("")
	f.Add("..")
	f.Add(b64(`{"alg":"none","kid":"ed"}`) + "." + b64(`{"fence":"1","exp":1893456000}`) + ".")
	f.Add(hs256(`{"alg":"HS256","kid":"ed"}`, `{"fence":"1","exp":1893456000}`, []byte("whatever")))
	f.Add(hs256(`{"alg":"HS256","kid":"hs","crit":["b64"],"b64":false}`, `{"fence":"1","exp":1893456000}`, []byte(strings.Repeat("k", 32))))
	f.Fuzz(func(t *testing.T, token string) {
		c, err := Verify(token, ks, t0, 5*time.Second)
		c2, err2 := Verify(token, ks, t0, 5*time.Second)
		if (err == nil) != (err2 == nil) || c != c2 {
			t.Fatalf("two answers: %+v %v / %+v %v", c, err, c2, err2)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("a refusal that is not an *Error: %v", err)
			}
			if len(token) >= 24 && strings.Contains(e.Reason, token) {
				t.Fatalf("the reason holds the token: %q", e.Reason)
			}
			return
		}
		if c.Expiry.IsZero() || t0.After(c.Expiry.Add(5*time.Second)) {
			t.Fatalf("accepted without a live exp: %+v", c)
		}
	})
}
