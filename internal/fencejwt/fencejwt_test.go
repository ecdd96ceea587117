package fencejwt

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newKeys makes a key of each kind and the set of all three.
func newKeys(t testing.TB) (map[string]*Signer, *KeySet, []byte) {
	t.Helper()
	signers := map[string]*Signer{}
	var all []json.RawMessage
	for _, kind := range []string{KindEdDSA, KindES256, KindHS256} {
		priv, set, err := NewKey(kind, "k-"+kind)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSigningKey(priv)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		signers[kind] = s
		var one struct{ Keys []json.RawMessage }
		if err := json.Unmarshal(set, &one); err != nil {
			t.Fatal(err)
		}
		all = append(all, one.Keys...)
	}
	data, err := json.Marshal(map[string]any{"keys": all})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := ParseKeySet(data)
	if err != nil {
		t.Fatal(err)
	}
	return signers, ks, data
}

func sign(t testing.TB, s *Signer, c Claims) string {
	t.Helper()
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// signRaw signs payload as it is, so that tests can send claims Sign would
// never write.
func signRaw(t testing.TB, s *Signer, payload string) string {
	t.Helper()
	jws, err := s.signer.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// hs256 builds a JWS by hand with header and payload, MACed with secret.
func hs256(header, payload string, secret []byte) string {
	in := b64(header) + "." + b64(payload)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func TestRoundTrip(t *testing.T) {
	signers, ks, _ := newKeys(t)
	for kind, s := range signers {
		c := Claims{Fence: 18446744073709551615, Expiry: t0.Add(time.Minute), NotBefore: t0.Add(-time.Second), Resource: "orders/*"}
		got, err := Verify(sign(t, s, c), ks, t0, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if got.Fence != c.Fence || got.Resource != c.Resource || !got.Expiry.Equal(c.Expiry) || !got.NotBefore.Equal(c.NotBefore) {
			t.Fatalf("%s: %+v, want %+v", kind, got, c)
		}
	}
}

func TestRefusals(t *testing.T) {
	signers, ks, _ := newKeys(t)
	ed, hs := signers[KindEdDSA], signers[KindHS256]
	valid := Claims{Fence: 42, Expiry: t0.Add(time.Minute)}
	good := sign(t, ed, valid)
	parts := strings.Split(good, ".")
	edPublic, _ := json.Marshal(ks.keys["k-EdDSA"].key) // the public key's bytes, as an attacker would have them
	tests := []struct {
		name, token, want string
	}{
		{"plain number", "42", "not a compact JWS"},
		{"oversized", strings.Repeat("a", MaxTokenSize+1), "over the limit of 4096"},
		{"malformed base64", "!!!." + parts[1] + "." + parts[2], "malformed JWS"},
		{"alg none", b64(`{"alg":"none","kid":"k-EdDSA"}`) + "." + parts[1] + ".", "malformed JWS"},
		{"no kid", hs256(`{"alg":"HS256"}`, `{"fence":"42","exp":9999999999}`, []byte(strings.Repeat("x", 32))), `no "kid"`},
		{"unknown kid", hs256(`{"alg":"HS256","kid":"nope"}`, `{"fence":"42","exp":9999999999}`, []byte(strings.Repeat("x", 32))), `no key with kid "nope"`},
		{"algorithm confusion", hs256(`{"alg":"HS256","kid":"k-EdDSA"}`, `{"fence":"42","exp":9999999999}`, edPublic), `names algorithm "HS256", but key "k-EdDSA" verifies EdDSA only`},
		{"crit header", hs256(`{"alg":"HS256","kid":"k-HS256","crit":["exp"],"exp":1}`, `{"fence":"42","exp":9999999999}`, ks.keys["k-HS256"].key.([]byte)), `"crit"`},
		{"bad signature", parts[0] + "." + b64(`{"fence":"43","exp":9999999999}`) + "." + parts[2], "bad signature"},
		{"forged with another key", sign(t, hs, valid)[:0] + hs256(`{"alg":"HS256","kid":"k-HS256"}`, `{"fence":"42","exp":9999999999}`, []byte(strings.Repeat("y", 32))), "bad signature"},
		{"expired", sign(t, ed, Claims{Fence: 42, Expiry: t0.Add(-6 * time.Second)}), "expired at 2026-11-30T11:59:54Z (leeway 5s)"},
		{"not yet valid", sign(t, ed, Claims{Fence: 42, Expiry: t0.Add(time.Hour), NotBefore: t0.Add(6 * time.Second)}), "not valid before"},
		{"duplicate claim", signRaw(t, ed, `{"fence":"41","exp":9999999999,"fence":"42"}`), `claim "fence" appears twice`},
		{"fence a number", signRaw(t, ed, `{"fence":42,"exp":9999999999}`), "claim fence is a JSON number"},
		{"fence leading zeros", signRaw(t, ed, `{"fence":"042","exp":9999999999}`), "leading zeros"},
		{"fence too big", signRaw(t, ed, `{"fence":"18446744073709551616","exp":9999999999}`), "not a canonical decimal uint64"},
		{"fence missing", signRaw(t, ed, `{"exp":9999999999}`), "claim fence is missing"},
		{"exp missing", signRaw(t, ed, `{"fence":"42"}`), "claim exp is missing"},
		{"exp a string", signRaw(t, ed, `{"fence":"42","exp":"soon"}`), "claim exp must be a JSON number"},
		// encoding/json fills a json.Number from a numeric string: these were
		// accepted once.
		{"exp a numeric string", signRaw(t, ed, `{"fence":"42","exp":"9999999999"}`), "claim exp must be a JSON number"},
		{"nbf a numeric string", signRaw(t, ed, `{"fence":"42","exp":9999999999,"nbf":"1"}`), "claim nbf must be a JSON number"},
		{"exp null", signRaw(t, ed, `{"fence":"42","exp":null}`), "claim exp must be a JSON number"},
		{"exp true", signRaw(t, ed, `{"fence":"42","exp":true}`), "claim exp must be a JSON number"},
		{"res empty", signRaw(t, ed, `{"fence":"42","exp":9999999999,"res":""}`), "claim res must be a non-empty string"},
		{"claims an array", signRaw(t, ed, `["fence"]`), "not a JSON object"},
		{"trailing data", signRaw(t, ed, `{"fence":"42","exp":9999999999} {}`), "data after the claims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.token, ks, t0, 5*time.Second)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Verify = %v, want an *Error", err)
			}
			if !strings.Contains(e.Reason, tc.want) {
				t.Fatalf("reason %q does not say %q", e.Reason, tc.want)
			}
			if len(tc.token) > 20 && strings.Contains(e.Reason, tc.token[:20]) {
				t.Fatalf("reason %q echoes the token", e.Reason)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		res, resource string
		want          bool
	}{
		{"", "orders/42", true},
		{"orders/42", "orders/42", true},
		{"orders/42", "orders/43", false},
		{"orders/*", "orders/43", true},
		{"orders/*", "orders", false},
		{"*", "anything", true},
		{"orders/4", "orders/42", false},
	} {
		if got := (Claims{Resource: tc.res}).Covers(tc.resource); got != tc.want {
			t.Errorf("res %q covers %q = %v", tc.res, tc.resource, got)
		}
	}
}

func TestParseKeySet(t *testing.T) {
	edPriv, _, err := NewKey(KindEdDSA, "priv")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, set, want string
	}{
		{"not json", `{`, "not a JWK Set"},
		{"no keys", `{}`, `no "keys" array`},
		{"no kid", `{"keys":[{"kty":"oct","k":"` + b64(strings.Repeat("s", 32)) + `"}]}`, `no "kid"`},
		{"short secret", `{"keys":[{"kty":"oct","kid":"a","k":"` + b64("short") + `"}]}`, "HS256 needs at least 32"},
		{"duplicate kid", `{"keys":[{"kty":"oct","kid":"a","k":"` + b64(strings.Repeat("s", 32)) + `"},{"kty":"oct","kid":"a","k":"` + b64(strings.Repeat("t", 32)) + `"}]}`, `kid "a" appears twice`},
		{"alg mismatch", `{"keys":[{"kty":"oct","kid":"a","alg":"HS512","k":"` + b64(strings.Repeat("s", 32)) + `"}]}`, `"alg"`},
		{"use enc", `{"keys":[{"kty":"oct","kid":"a","use":"enc","k":"` + b64(strings.Repeat("s", 32)) + `"}]}`, `"use" is "enc"`},
		{"private key", `{"keys":[` + string(edPriv) + `]}`, "a private key"},
		{"P-384", `{"keys":[{"kty":"EC","kid":"a","crv":"P-384","x":"` + b64(strings.Repeat("x", 48)) + `","y":"` + b64(strings.Repeat("y", 48)) + `"}]}`, "key 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeySet([]byte(tc.set))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseKeySet = %v, want %q", err, tc.want)
			}
		})
	}
}

// An empty set is valid and verifies nothing: emptying the keys file is how
// an operator revokes every key at once, and it must not be mistaken for a
// broken file (which would keep the old keys in force).
func TestEmptyKeySetRevokes(t *testing.T) {
	signers, ks, _ := newKeys(t)
	empty, err := ParseKeySet([]byte(`{"keys":[]}`))
	if err != nil {
		t.Fatalf("ParseKeySet of an empty set: %v", err)
	}
	if empty.Len() != 0 {
		t.Fatalf("%d keys, want 0", empty.Len())
	}
	v := NewVerifier(ks, time.Second, 0)
	v.now = func() time.Time { return t0 }
	for kind, s := range signers {
		tok := sign(t, s, Claims{Fence: 7, Expiry: t0.Add(time.Minute)})
		if _, err := v.Verify(tok); err != nil { // verified and cached
			t.Fatalf("%s before revocation: %v", kind, err)
		}
		v.SetKeys(empty)
		_, err := v.Verify(tok)
		var fe *Error
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "no signing key is in force") {
			t.Fatalf("%s after revocation: %v, want a refusal naming the empty set", kind, err)
		}
		v.SetKeys(ks)
	}
}

// The cache serves a token only under the key set it was verified with
// and until its exp: a key removed, or time passing exp, refuses it even
// though it was verified before.
func TestVerifierCache(t *testing.T) {
	signers, ks, _ := newKeys(t)
	v := NewVerifier(ks, time.Second, 0)
	now := t0
	v.now = func() time.Time { return now }
	tok := sign(t, signers[KindEdDSA], Claims{Fence: 7, Expiry: t0.Add(10 * time.Second)})
	for range 3 {
		if c, err := v.Verify(tok); err != nil || c.Fence != 7 {
			t.Fatalf("Verify = %+v, %v", c, err)
		}
	}
	if n := v.cached(); n != 1 {
		t.Fatalf("%d tokens cached, want 1", n)
	}
	// Another key set without the EdDSA key.
	only, err := ParseKeySet(mustSet(t, ks, "k-HS256"))
	if err != nil {
		t.Fatal(err)
	}
	v.SetKeys(only)
	if _, err := v.Verify(tok); err == nil || !strings.Contains(err.Error(), `no key with kid "k-EdDSA"`) {
		t.Fatalf("after the key was removed: %v", err)
	}
	v.SetKeys(ks)
	if _, err := v.Verify(tok); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(11*time.Second + time.Millisecond)
	if _, err := v.Verify(tok); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("past exp + leeway: %v", err)
	}
	// Refusals are not cached, and the cache stays bounded.
	small := NewVerifier(ks, time.Second, 32)
	small.now = func() time.Time { return t0 }
	for i := range 1000 {
		_, _ = small.Verify(sign(t, signers[KindHS256], Claims{Fence: uint64(i), Expiry: t0.Add(time.Hour)}))
		_, _ = small.Verify("garbage." + b64("x") + ".y")
	}
	if n := small.cached(); n > 32 {
		t.Fatalf("%d tokens cached, over the bound of 32", n)
	}
}

// mustSet is the JWK Set of ks's keys with the given kids.
func mustSet(t *testing.T, ks *KeySet, kids ...string) []byte {
	t.Helper()
	var keys []any
	for _, kid := range kids {
		k := ks.keys[kid]
		keys = append(keys, map[string]string{"kty": "oct", "kid": kid, "k": base64.RawURLEncoding.EncodeToString(k.key.([]byte))})
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func (v *Verifier) cached() int {
	n := 0
	for i := range v.shards {
		v.shards[i].mu.Lock()
		n += len(v.shards[i].entries)
		v.shards[i].mu.Unlock()
	}
	return n
}
