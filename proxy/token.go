package proxy

import (
	"errors"
	"strings"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// ErrTokenAbsent reports a request without the token header. It is not a
// *TokenError: an absent token is a different answer (428, or forwarded
// unfenced on a route whose token is optional) from a malformed one (400).
var ErrTokenAbsent = errors.New("fencing token absent")

// TokenError reports a token header that is present but is not exactly one
// canonical decimal uint64. Reason is a short fixed phrase naming the rule
// that was broken; it never echoes the header value, so it is safe to log and
// to return in a problem detail.
//
// ParseToken returns one shared *TokenError per reason, so that refusing a
// token allocates nothing; treat the value as read-only.
type TokenError struct {
	Reason string
}

func (e *TokenError) Error() string { return "malformed token: " + e.Reason }

// fault is what parseDecimalField found wrong with a header's values: the
// rule it breaks. ParseToken and ParseSequence share the parser and the
// reasons; each maps a fault to its own error.
type fault uint8

const (
	faultNone fault = iota
	faultAbsent
	faultRepeated
	faultList
	faultEmpty
	faultNotDecimal
	faultLeadingZero
	faultTooLong
	faultOutOfRange
	numFaults
)

// faultReasons are the Reason texts, the same for the token and the sequence.
var faultReasons = [numFaults]string{
	faultRepeated:    "repeated header",
	faultList:        "comma-separated list",
	faultEmpty:       "empty",
	faultNotDecimal:  "not a decimal number",
	faultLeadingZero: "leading zero",
	faultTooLong:     "too long",
	faultOutOfRange:  "out of range",
}

// One value per reason: the parse path must not allocate, and tests tell the
// reasons apart by identity.
var (
	errTokenRepeated    = &TokenError{Reason: faultReasons[faultRepeated]}
	errTokenList        = &TokenError{Reason: faultReasons[faultList]}
	errTokenEmpty       = &TokenError{Reason: faultReasons[faultEmpty]}
	errTokenNotDecimal  = &TokenError{Reason: faultReasons[faultNotDecimal]}
	errTokenLeadingZero = &TokenError{Reason: faultReasons[faultLeadingZero]}
	errTokenTooLong     = &TokenError{Reason: faultReasons[faultTooLong]}
	errTokenOutOfRange  = &TokenError{Reason: faultReasons[faultOutOfRange]}
)

// tokenErrors is ParseToken's error for each fault.
var tokenErrors = [numFaults]error{
	faultAbsent:      ErrTokenAbsent,
	faultRepeated:    errTokenRepeated,
	faultList:        errTokenList,
	faultEmpty:       errTokenEmpty,
	faultNotDecimal:  errTokenNotDecimal,
	faultLeadingZero: errTokenLeadingZero,
	faultTooLong:     errTokenTooLong,
	faultOutOfRange:  errTokenOutOfRange,
}

// ParseToken parses the token header's values (r.Header[name], all lines of
// it). The header must be present exactly once, and its value, after
// optional whitespace (SP and HTAB) is trimmed from both ends, must be a
// canonical decimal uint64: 1 to 20 ASCII digits, no sign, no leading zero
// unless the number is 0, at most 18446744073709551615.
//
// It is strict on purpose: a token must have exactly one spelling. If "007"
// were accepted as 7, the proxy would fence one token that a log, a metric
// label or an upstream re-checking the header sees as two different strings;
// likewise "+7", "7.0" or a second header line that an upstream might read
// instead of the first. A list ("7, 8") is refused rather than choosing an
// element, since intermediaries disagree about which one wins.
//
// It returns ErrTokenAbsent when values is empty, and otherwise a
// *TokenError for anything but one canonical number. It allocates nothing,
// on success or on failure.
func ParseToken(values []string) (uint64, error) {
	v, f := parseDecimalField(values)
	if f != faultNone {
		return 0, tokenErrors[f]
	}
	return v, nil
}

// parseDecimalField is the parser of ParseToken and ParseSequence: the one
// canonical decimal uint64 that values (all lines of one header) must hold,
// or the first rule they break. It allocates nothing.
func parseDecimalField(values []string) (uint64, fault) {
	switch len(values) {
	case 0:
		return 0, faultAbsent
	case 1:
	default:
		return 0, faultRepeated
	}
	s := values[0]
	// A comma is looked for before trimming and before the digits, so that a
	// list is named as such ("7, 8" is a list, not a bad number).
	if strings.IndexByte(s, ',') >= 0 {
		return 0, faultList
	}
	v, f := fencestore.ParseDecimal(trimTokenOWS(s))
	return v, decimalFaults[f]
}

// decimalFaults maps fencestore.ParseDecimal's faults to the header's.
var decimalFaults = [...]fault{
	fencestore.DecimalOK:          faultNone,
	fencestore.DecimalEmpty:       faultEmpty,
	fencestore.DecimalNotDigits:   faultNotDecimal,
	fencestore.DecimalLeadingZero: faultLeadingZero,
	fencestore.DecimalTooLong:     faultTooLong,
	fencestore.DecimalOutOfRange:  faultOutOfRange,
}

// trimTokenOWS trims HTTP optional whitespace (RFC 9110: SP and HTAB, nothing
// else) from both ends. strings.TrimSpace would also accept CR, LF, VT, FF
// and Unicode spaces, which are not whitespace in a header value.
func trimTokenOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// tokenOf reads the token header's values: a canonical decimal (ParseToken),
// or with signed tokens a JWS that p.tokens verifies, whose fence claim is
// the token and whose claims come back for the resource check. A signed
// token that does not verify is a *fencejwt.Error.
func (p *Proxy) tokenOf(values []string) (uint64, fencejwt.Claims, error) {
	if p.tokens == nil {
		t, err := ParseToken(values)
		return t, fencejwt.Claims{}, err
	}
	switch len(values) {
	case 0:
		return 0, fencejwt.Claims{}, ErrTokenAbsent
	case 1:
	default:
		return 0, fencejwt.Claims{}, errSignedRepeated
	}
	c, err := p.tokens.Verify(trimTokenOWS(values[0]))
	if err != nil {
		return 0, fencejwt.Claims{}, err
	}
	return c.Fence, c, nil
}

var errSignedRepeated = &fencejwt.Error{Reason: "repeated header"}
