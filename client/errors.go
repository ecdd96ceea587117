package client

import "errors"

// Sentinel errors. A *ProblemError from fenceproxy matches (errors.Is) the one
// for its problem type; see ProblemError.Is.
var (
	// ErrStaleToken: the token is older than the resource's high-water mark
	// (409, urn:fenceproxy:stale-token). A newer lease holder has written, so
	// this process no longer owns the resource. Retrying with the same token
	// cannot succeed; stop acting on the resource.
	ErrStaleToken = errors.New("fenceproxy: stale fencing token")
	// ErrTokenRequired: the route is fenced and the request carried no token
	// (428, urn:fenceproxy:token-required).
	ErrTokenRequired = errors.New("fenceproxy: fencing token required")
	// ErrTokenMalformed: the token header was not one canonical decimal
	// uint64 (400, urn:fenceproxy:token-malformed). The header name the proxy
	// expects may differ from Transport.Header.
	ErrTokenMalformed = errors.New("fenceproxy: malformed fencing token")
	// ErrTokenInvalid: the proxy verifies signed tokens
	// (FENCE_TOKEN_KEYS_FILE) and this one is not valid (401,
	// urn:fenceproxy:token-invalid): not a signed token at all (a plain
	// number included), a bad signature, a key id the proxy does not know,
	// expired or not yet valid, or missing claims; ProblemError.Detail says
	// which. The mark was not touched. An expired token needs a fresh one
	// (renew the lease); the others are a configuration mismatch between the
	// lease service's key and the proxy's keys file.
	ErrTokenInvalid = errors.New("fenceproxy: invalid signed fencing token")
	// ErrTokenWrongResource: the signed token is valid but its res claim
	// does not cover the resource the request acts on (403,
	// urn:fenceproxy:token-wrong-resource). The mark was not touched.
	ErrTokenWrongResource = errors.New("fenceproxy: signed fencing token for another resource")
	// ErrBadRequest: the proxy could not name the resource the request acts on,
	// or the path is ambiguous (400, urn:fenceproxy:bad-request).
	ErrBadRequest = errors.New("fenceproxy: bad request")
	// ErrStoreUnavailable: the proxy's store did not answer in time (503,
	// urn:fenceproxy:store-unavailable); ProblemError.RetryAfter says when to
	// try again. Nothing reached the upstream, but the store may still have
	// recorded the token: a retry with the same token is admitted under the
	// ">=" compare and refused as stale under ">".
	ErrStoreUnavailable = errors.New("fenceproxy: fence store unavailable")
	// ErrStaleSequence: on a route ordered by a sequence, the token equals the
	// resource's mark and the sequence is not above the mark's (409,
	// urn:fenceproxy:stale-sequence); ProblemError.Sequence and
	// HighWaterSequence say which. The lease is still this holder's: a request
	// of the same token with a greater sequence was admitted first (one sent
	// concurrently, or a later one), or this very request was admitted before
	// and is a retry. It is not ErrStaleToken; do not stop because of it, and
	// do not re-send the request with a new number without knowing it did not
	// already apply.
	ErrStaleSequence = errors.New("fenceproxy: stale fencing sequence")
	// ErrSequenceRequired: the route is ordered by a sequence and the request
	// carried a token but no sequence (428, urn:fenceproxy:sequence-required):
	// its context had no WithSequence, or the header name the proxy expects
	// differs from Transport.SequenceHeader.
	ErrSequenceRequired = errors.New("fenceproxy: fencing sequence required")
	// ErrSequenceMalformed: the sequence header was not one canonical decimal
	// uint64 (400, urn:fenceproxy:sequence-malformed).
	ErrSequenceMalformed = errors.New("fenceproxy: malformed fencing sequence")
	// ErrDrainTimeout: the request was admitted (the resource's mark moved
	// to its token, and sequence) but waited longer than the proxy's
	// FENCE_DRAIN_TIMEOUT for older requests of the resource to end, and was
	// never forwarded (503, urn:fenceproxy:drain-timeout, "forwarded":
	// "false"); ProblemError.RetryAfter says when to try again. Nothing of it
	// reached the upstream, so sending it again applies it at most once:
	// through a context with a Sequence (WithSequence) the new send draws a
	// new number and is admitted. A number pinned with WithSequenceNumber is
	// spent: the same number again is refused as ErrStaleSequence although
	// the request never applied, so pin a new one above it
	// (ProblemError.Sequence). Under compare ">" the token is spent too: a
	// new send needs a new token.
	ErrDrainTimeout = errors.New("fenceproxy: older requests still in flight, nothing forwarded")
	// ErrNoToken: Transport was asked to send a request whose context carries
	// no token (see WithToken) and Transport.Optional is false, or that carries
	// a sequence (see WithSequence) but no token. Nothing was sent.
	ErrNoToken = errors.New("client: request context carries no fencing token")
	// ErrSequenceExhausted: the Sequence has given its last number,
	// math.MaxUint64 (see Sequence.Next); Transport returns it without
	// sending the request.
	ErrSequenceExhausted = errors.New("client: fencing sequence exhausted")
)
