package fencejwt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// MaxTokenSize bounds a signed token, in bytes: a longer header is refused
// before anything parses it. A token of this format is under 400 bytes
// with a long res.
const MaxTokenSize = 4096

// Claims are what a signed token says.
type Claims struct {
	Fence     uint64    // the fencing token
	Expiry    time.Time // exp
	NotBefore time.Time // nbf; zero when absent
	// Resource is res: a resource name, a prefix ending in '*', or ""
	// (absent) for every resource.
	Resource string
}

// Covers reports whether the token is valid for resource: res absent, res
// the resource itself, or res a prefix ending in '*' that resource begins
// with.
func (c Claims) Covers(resource string) bool {
	if c.Resource == "" || c.Resource == resource {
		return true
	}
	p, ok := strings.CutSuffix(c.Resource, "*")
	return ok && strings.HasPrefix(resource, p)
}

// Error is why a token is refused. Its text is safe for a problem's detail
// and a log: it never holds the token, nor more than a short quote of a
// header value the sender chose.
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

func refuse(format string, args ...any) error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Verify checks token (the header value, without surrounding whitespace)
// against keys at now, with leeway for exp and nbf, and returns its claims,
// or an *Error naming the first rule it breaks.
func Verify(token string, keys *KeySet, now time.Time, leeway time.Duration) (Claims, error) {
	if len(token) > MaxTokenSize {
		return Claims{}, refuse("the token is %d bytes, over the limit of %d", len(token), MaxTokenSize)
	}
	if strings.Count(token, ".") != 2 {
		return Claims{}, refuse("not a compact JWS (three base64url parts joined by '.'); with FENCE_TOKEN_KEYS_FILE set, a plain number is not accepted")
	}
	jws, err := jose.ParseSignedCompact(token, algorithms)
	if err != nil {
		return Claims{}, refuse("malformed JWS: %v", trimJose(err))
	}
	if len(jws.Signatures) != 1 {
		return Claims{}, refuse("malformed JWS: %d signatures", len(jws.Signatures))
	}
	h := jws.Signatures[0].Protected
	if _, ok := h.ExtraHeaders["crit"]; ok {
		return Claims{}, refuse(`the JWS header has "crit": no extension is understood, so none may be critical`)
	}
	if h.KeyID == "" {
		return Claims{}, refuse(`the JWS header has no "kid"`)
	}
	if keys.Len() == 0 {
		return Claims{}, refuse("no signing key is in force (the keys file holds none, or was removed): every signed token is refused")
	}
	k, ok := keys.keys[h.KeyID]
	if !ok {
		return Claims{}, refuse("no key with kid %s in the keys file", quote(h.KeyID))
	}
	if h.Algorithm != string(k.alg) {
		return Claims{}, refuse("the JWS names algorithm %s, but key %s verifies %s only", quote(h.Algorithm), quote(h.KeyID), k.alg)
	}
	payload, err := jws.Verify(k.key)
	if err != nil {
		return Claims{}, refuse("bad signature for key %s", quote(h.KeyID))
	}
	c, err := parseClaims(payload)
	if err != nil {
		return Claims{}, err
	}
	if now.After(c.Expiry.Add(leeway)) {
		return Claims{}, refuse("expired at %s (leeway %s)", c.Expiry.UTC().Format(time.RFC3339), leeway)
	}
	if !c.NotBefore.IsZero() && now.Add(leeway).Before(c.NotBefore) {
		return Claims{}, refuse("not valid before %s (leeway %s)", c.NotBefore.UTC().Format(time.RFC3339), leeway)
	}
	return c, nil
}

// quote quotes s, cut to 64 bytes: a sender's string in a detail stays
// short.
func quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// parseClaims reads the JWT claims strictly: one JSON object with no name
// twice (encoding/json would keep the last of two, and two readers could
// then disagree on the token), fence a JSON string holding a canonical
// decimal uint64, exp a JSON number (never a string), nbf a JSON number when present, res a non-empty
// string when present. Other claims are ignored.
func parseClaims(payload []byte) (Claims, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return Claims{}, refuse("the claims are not a JSON object")
	}
	var c Claims
	var hasFence, hasExp bool
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return Claims{}, refuse("the claims are not valid JSON")
		}
		name, _ := t.(string)
		if seen[name] {
			return Claims{}, refuse("claim %s appears twice", quote(name))
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return Claims{}, refuse("the claims are not valid JSON")
		}
		switch name {
		case "fence":
			if c.Fence, err = fenceClaim(v); err != nil {
				return Claims{}, err
			}
			hasFence = true
		case "exp":
			if c.Expiry, err = dateClaim("exp", v); err != nil {
				return Claims{}, err
			}
			hasExp = true
		case "nbf":
			if c.NotBefore, err = dateClaim("nbf", v); err != nil {
				return Claims{}, err
			}
		case "res":
			if err := json.Unmarshal(v, &c.Resource); err != nil || c.Resource == "" {
				return Claims{}, refuse("claim res must be a non-empty string: a resource name, or a prefix ending in '*'")
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return Claims{}, refuse("the claims are not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Claims{}, refuse("data after the claims object")
	}
	switch {
	case !hasFence:
		return Claims{}, refuse("claim fence is missing")
	case !hasExp:
		return Claims{}, refuse("claim exp is missing: a signed token must expire")
	}
	return c, nil
}

func fenceClaim(v json.RawMessage) (uint64, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		if len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
			return 0, refuse("claim fence is a JSON number; it must be a string of decimal digits (a number above 2^53 loses digits in many JSON libraries)")
		}
		return 0, refuse("claim fence must be a string of decimal digits")
	}
	n, ok := fencestore.ParseMark(s)
	switch {
	case ok:
		return n, nil
	case len(s) > 1 && s[0] == '0' && strings.Trim(s, "0123456789") == "":
		return 0, refuse("claim fence has leading zeros")
	}
	return 0, refuse("claim fence is not a canonical decimal uint64 (1 to 20 digits, at most 18446744073709551615)")
}

func dateClaim(name string, v json.RawMessage) (time.Time, error) {
	// A JSON number only: encoding/json fills a json.Number from a string
	// too ("1700000000"), which RFC 7519 (a NumericDate is a number) and
	// most verifiers refuse, and a lenient one would read otherwise.
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return time.Time{}, refuse("claim %s must be a JSON number of seconds since the epoch, not a string or another type", name)
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return time.Time{}, refuse("claim %s must be a number of seconds since the epoch", name)
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e11 {
		return time.Time{}, refuse("claim %s is out of range", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}
