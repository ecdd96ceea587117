package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// DefaultHeader is the token header fenceproxy reads unless FENCE_TOKEN_HEADER
// names another.
const DefaultHeader = "Fencing-Token"

// DefaultSequenceHeader is the sequence header fenceproxy reads unless
// FENCE_SEQUENCE_HEADER names another.
const DefaultSequenceHeader = "Fencing-Sequence"

// Transport is an http.RoundTripper that sends each request with the fencing
// token of its context (see WithToken, and WithSignedToken for a proxy that
// verifies signed tokens), and the sequence when the context has one (see
// WithSequence), and turns fenceproxy's refusals into errors. The zero
// value is ready to use: it sends through http.DefaultTransport with the
// headers Fencing-Token and Fencing-Sequence and refuses to send a request
// whose context has no token.
//
// A request whose context carries a Sequence is sent with a number drawn from
// it when RoundTrip is called: every call draws a fresh one. http.Client calls
// RoundTrip once for each request it sends, so a redirect that re-sends the
// request, or a caller sending the same *http.Request again, gets a new,
// greater number, and the proxy admits it after the first was admitted (to
// send one number however often the request is sent, use
// WithSequenceNumber). Requests sent concurrently draw distinct numbers, but
// may reach the proxy in another order than they were drawn; those that arrive
// after a greater number of the same token are refused (ErrStaleSequence).
//
// Unlike the usual RoundTripper, Transport interprets responses: a refusal by
// fenceproxy (see CheckResponse) is returned as a *ProblemError and no
// response, its body read and closed. This is deliberate. A refusal means the
// request never reached the upstream, and a stale token means the caller has
// lost its lease; as an error it cannot be ignored by a caller that checks only
// err, and it can be matched after http.Client.Do with
// errors.Is(err, client.ErrStaleToken), or errors.As into a *ProblemError:
// http.Client wraps the error in a *url.Error, which unwraps to it. Every other
// response, including the upstream application's own 409s and problem
// answers, is returned untouched with a nil error as usual. A caller that
// wants the plain RoundTripper behaviour can use its own transport and call
// CheckResponse.
//
// Transport is safe for concurrent use if Base is.
type Transport struct {
	// Base sends the request once its token header is set. If nil,
	// http.DefaultTransport is used.
	Base http.RoundTripper

	// Header is the name of the header that carries the token; it must match
	// the proxy's FENCE_TOKEN_HEADER. If empty, DefaultHeader
	// ("Fencing-Token") is used.
	Header string

	// SequenceHeader is the name of the header that carries the sequence; it
	// must match the proxy's FENCE_SEQUENCE_HEADER, and differ from the token
	// header. If empty, DefaultSequenceHeader ("Fencing-Sequence") is used.
	SequenceHeader string

	// Optional lets a request whose context carries no token be sent, without
	// the header (any value the caller set is removed, so that the only token
	// a request ever carries is the one its context gave it); for routes the
	// proxy configures with "token: optional", or requests it does not fence.
	// If false (the default), such a request is not sent: RoundTrip returns
	// ErrNoToken without touching the network. A request whose context
	// carries a sequence but no token is never sent, Optional or not: a
	// sequence orders the requests of one token.
	Optional bool
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip sends a clone of req with the token header set to the canonical
// decimal of the token in req's context, or to its signed token as it is
// (WithSignedToken), and the sequence header to that of
// the sequence its context gives (a fresh number from a Sequence on every
// call), replacing any value the caller set under any spelling of either
// header's name; req itself is not modified. A request whose context gives no
// sequence is sent without the sequence header. See Transport for what it
// returns.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, ok, err := tokenValue(req.Context())
	seqv, hasSeq := sequenceFromContext(req.Context())
	name, seqName := t.header(), t.sequenceHeader()
	var seq uint64
	switch {
	case err != nil:
	case !ok && (hasSeq || !t.Optional):
		err = ErrNoToken
	case hasSeq && strings.EqualFold(seqName, name):
		err = fmt.Errorf("client: Transport.SequenceHeader %q is the token header", seqName)
	case hasSeq:
		seq, err = seqv.draw() // drawn last: a request refused here spends no number
	}
	if err != nil {
		// As http.RoundTripper's documentation requires: the request body is closed, even on
		// error.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}

	out := req.Clone(req.Context()) // a deep copy of the header, which is modified below
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	// A header map is keyed by canonical names, but a caller can store other
	// spellings directly; each would be sent as a further value, and the
	// proxy refuses a repeated header as malformed.
	for k := range out.Header {
		if strings.EqualFold(k, name) || strings.EqualFold(k, seqName) {
			delete(out.Header, k)
		}
	}
	if ok {
		out.Header[name] = []string{token}
		if hasSeq {
			out.Header[seqName] = []string{strconv.FormatUint(seq, 10)}
		}
	}

	resp, err := t.base().RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if err := CheckResponse(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// tokenValue is the token header's value for ctx, and whether ctx carries a
// token: the canonical decimal of a plain token, or a signed token byte for
// byte. A signed token that a header cannot carry unchanged is an error
// rather than something to clean up: trimming or escaping it would break its
// signature, and the caller would then meet a 401 far from the cause.
func tokenValue(ctx context.Context) (string, bool, error) {
	switch v := ctx.Value(tokenKey{}).(type) {
	case uint64:
		return strconv.FormatUint(v, 10), true, nil
	case signedToken:
		if v == "" {
			return "", true, errors.New("client: the signed token in the request context is empty")
		}
		for i := 0; i < len(v); i++ {
			if v[i] <= ' ' || v[i] > '~' {
				return "", true, fmt.Errorf("client: the signed token in the request context has %q at byte %d: only visible ASCII can be sent unchanged", v[i], i)
			}
		}
		return string(v), true, nil
	}
	return "", false, nil
}

// CloseIdleConnections closes the idle connections of Base if it has such a
// method, so that http.Client.CloseIdleConnections reaches through Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) header() string {
	if t.Header != "" {
		return http.CanonicalHeaderKey(t.Header)
	}
	return DefaultHeader
}

func (t *Transport) sequenceHeader() string {
	if t.SequenceHeader != "" {
		return http.CanonicalHeaderKey(t.SequenceHeader)
	}
	return DefaultSequenceHeader
}
