package proxy

import (
	"errors"
	"strings"
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

// One value per reason: the parse path must not allocate, and tests tell the
// reasons apart by identity.
var (
	errTokenRepeated    = &TokenError{Reason: "repeated header"}
	errTokenList        = &TokenError{Reason: "comma-separated list"}
	errTokenEmpty       = &TokenError{Reason: "empty"}
	errTokenNotDecimal  = &TokenError{Reason: "not a decimal number"}
	errTokenLeadingZero = &TokenError{Reason: "leading zero"}
	errTokenTooLong     = &TokenError{Reason: "too long"}
	errTokenOutOfRange  = &TokenError{Reason: "out of range"}
)

// tokenMaxDecimal is math.MaxUint64 spelled in decimal. Two canonical decimal
// strings of equal length compare as numbers when compared as strings, so a
// 20-digit token is in range iff it is not greater than this string: the
// overflow check is exact and needs no arithmetic.
const tokenMaxDecimal = "18446744073709551615"

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
	switch len(values) {
	case 0:
		return 0, ErrTokenAbsent
	case 1:
	default:
		return 0, errTokenRepeated
	}
	s := values[0]
	// A comma is looked for before trimming and before the digits, so that a
	// list is named as such ("7, 8" is a list, not a bad number).
	if strings.IndexByte(s, ',') >= 0 {
		return 0, errTokenList
	}
	s = trimTokenOWS(s)
	if s == "" {
		return 0, errTokenEmpty
	}
	// Byte-wise, so non-ASCII digits such as "١٢" are refused: only ASCII
	// '0'-'9' spell a token. v may wrap here for a long input; it is only
	// returned once the length and range checks below have passed.
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errTokenNotDecimal
		}
		v = v*10 + uint64(c-'0')
	}
	switch {
	case len(s) > 1 && s[0] == '0':
		return 0, errTokenLeadingZero
	case len(s) > len(tokenMaxDecimal):
		return 0, errTokenTooLong
	case len(s) == len(tokenMaxDecimal) && s > tokenMaxDecimal:
		return 0, errTokenOutOfRange
	}
	return v, nil
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
