package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Problem types of fenceproxy's answers (README.md, Answers): the "type" member of its RFC 9457
// answers. Only answers whose type has typePrefix are fenceproxy's.
const (
	typePrefix           = "urn:fenceproxy:"
	typeStaleToken       = typePrefix + "stale-token"
	typeTokenRequired    = typePrefix + "token-required"
	typeTokenMalformed   = typePrefix + "token-malformed"
	typeTokenInvalid     = typePrefix + "token-invalid"
	typeWrongResource    = typePrefix + "token-wrong-resource"
	typeBadRequest       = typePrefix + "bad-request"
	typeStoreUnavailable = typePrefix + "store-unavailable"

	typeStaleSequence     = typePrefix + "stale-sequence"
	typeSequenceRequired  = typePrefix + "sequence-required"
	typeSequenceMalformed = typePrefix + "sequence-malformed"
	typeDrainTimeout      = typePrefix + "drain-timeout"
)

// maxProblemBytes bounds how much of a problem+json body is read to decide
// whether it is fenceproxy's. The proxy's answers are a few hundred bytes; a
// larger body is not one of them and is handed back unread past this point.
const maxProblemBytes = 64 << 10

// ProblemError is a refusal by fenceproxy: an application/problem+json answer
// (RFC 9457) whose type starts with "urn:fenceproxy:". The upstream received
// nothing of the request. errors.Is matches it against the sentinel of its type
// (ErrStaleToken, ErrStaleSequence, ErrTokenRequired, ...); a type this package does not know (a
// newer proxy's) matches none but is still a ProblemError.
type ProblemError struct {
	// Status is the HTTP status code of the answer.
	Status int
	// Type is the problem type, e.g. "urn:fenceproxy:stale-token".
	Type string
	// Title and Detail are the human-readable summary and explanation.
	Title, Detail string
	// Route is the name of the proxy route the request matched, when it has one.
	Route string
	// Resource is the fenced resource, when the proxy got as far as naming it.
	Resource string
	// Token is the token the proxy read from the request, or 0 when the answer
	// names none (the request's own token is in its context).
	Token uint64
	// HighWaterMark is the resource's mark when HasMark is true: the greatest
	// token admitted so far. A stale token's answer always carries it.
	HighWaterMark uint64
	// HasMark reports whether the answer carried a high-water mark. Without
	// it HighWaterMark is 0, which is also a valid mark.
	HasMark bool
	// Sequence is the sequence the proxy read from the request, or 0 when the
	// answer names none. A number drawn from a Sequence is never 0, so this
	// is how a caller learns which number a refused request was sent with.
	Sequence uint64
	// HighWaterSequence is the mark's sequence when HasHighWaterSequence is
	// true: the greatest sequence admitted with token HighWaterMark. A
	// stale-sequence answer always carries it; a stale-token answer carries
	// it when the mark has one.
	HighWaterSequence uint64
	// HasHighWaterSequence reports whether the answer carried a high-water
	// sequence; without it HighWaterSequence is 0, also a valid sequence.
	HasHighWaterSequence bool
	// RetryAfter is the answer's Retry-After delay (a 503 from an unavailable
	// store carries one), or 0 when it has none.
	RetryAfter time.Duration
}

// Error describes the refusal with the proxy's own title and detail, which
// name the token and mark, plus the route and resource when known.
func (e *ProblemError) Error() string {
	var b strings.Builder
	title := e.Title
	if title == "" {
		title = e.Type
	}
	fmt.Fprintf(&b, "fenceproxy: %d %s", e.Status, title)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	var where []string
	if e.Route != "" {
		where = append(where, "route "+strconv.Quote(e.Route))
	}
	if e.Resource != "" {
		where = append(where, "resource "+strconv.Quote(e.Resource))
	}
	if len(where) > 0 {
		b.WriteString(" (" + strings.Join(where, ", ") + ")")
	}
	return b.String()
}

// Is reports whether target is the sentinel error of e's problem type, so that
// errors.Is(err, ErrStaleToken) holds for a stale-token answer.
func (e *ProblemError) Is(target error) bool {
	switch e.Type {
	case typeStaleToken:
		return target == ErrStaleToken
	case typeTokenRequired:
		return target == ErrTokenRequired
	case typeTokenMalformed:
		return target == ErrTokenMalformed
	case typeTokenInvalid:
		return target == ErrTokenInvalid
	case typeWrongResource:
		return target == ErrTokenWrongResource
	case typeBadRequest:
		return target == ErrBadRequest
	case typeStoreUnavailable:
		return target == ErrStoreUnavailable
	case typeStaleSequence:
		return target == ErrStaleSequence
	case typeSequenceRequired:
		return target == ErrSequenceRequired
	case typeSequenceMalformed:
		return target == ErrSequenceMalformed
	case typeDrainTimeout:
		return target == ErrDrainTimeout
	}
	return false
}

// CheckResponse returns a *ProblemError when resp is a refusal by fenceproxy,
// having read and closed its body; otherwise it returns nil and resp reads as
// it arrived. It is for callers that send through their own RoundTripper
// rather than Transport, which calls it on every response.
//
// Only a response with status 400 or above, Content-Type
// application/problem+json and a "type" starting with "urn:fenceproxy:" is a
// refusal. For any other problem+json response the body has been read (up to
// 64 KiB) to look at its type, and resp.Body is replaced by a reader that
// yields the same bytes and closes the original. Every other response is not
// touched at all.
//
// The error is not a *ProblemError only when the body of a problem+json answer
// could not be read; the body is closed then too.
func CheckResponse(resp *http.Response) error {
	if resp == nil || resp.Body == nil || resp.StatusCode < 400 || !isProblemJSON(resp.Header.Get("Content-Type")) {
		return nil
	}
	body := resp.Body
	buf, err := io.ReadAll(io.LimitReader(body, maxProblemBytes+1))
	if err != nil {
		_ = body.Close()
		return fmt.Errorf("client: reading the problem answer (status %d): %w", resp.StatusCode, err)
	}
	var pe *ProblemError
	ok := false
	if len(buf) <= maxProblemBytes {
		pe, ok = parseProblem(buf)
	}
	if !ok {
		resp.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), body), Closer: body}
		return nil
	}
	_ = body.Close()
	pe.Status = resp.StatusCode
	pe.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return pe
}

// replayBody is a response body whose first bytes were read to inspect them.
type replayBody struct {
	io.Reader
	io.Closer
}

func isProblemJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/problem+json"
}

// parseProblem decodes a fenceproxy problem body; ok is false when body is
// not JSON or its type is not fenceproxy's. Members are read one by one so
// that one of an unexpected JSON type costs only that member, never the
// recognition of the refusal itself.
func parseProblem(body []byte) (pe *ProblemError, ok bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false
	}
	typ, _ := jsonString(m["type"])
	if !strings.HasPrefix(typ, typePrefix) {
		return nil, false
	}
	pe = &ProblemError{Type: typ}
	pe.Title, _ = jsonString(m["title"])
	pe.Detail, _ = jsonString(m["detail"])
	pe.Route, _ = jsonString(m["route"])
	pe.Resource, _ = jsonString(m["resource"])
	pe.Token, _ = jsonUint(m["token"])
	pe.HighWaterMark, pe.HasMark = jsonUint(m["highWaterMark"])
	pe.Sequence, _ = jsonUint(m["sequence"])
	pe.HighWaterSequence, pe.HasHighWaterSequence = jsonUint(m["highWaterSequence"])
	return pe, true
}

func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonUint reads a uint64 written as a decimal string, as fenceproxy writes
// it (JSON numbers lose precision past 2^53 in most decoders). An integer
// written as a bare JSON number is accepted too, parsed from its text, never
// through a float64.
func jsonUint(raw json.RawMessage) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, false
	}
	text := string(raw)
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		text = strings.TrimSpace(s)
	}
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP-date (RFC 9110
// section 10.2.3); anything else, or a date in the past, is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
