package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem types of fenceproxy's answers (README.md, Answers). Each is the "type" member of an RFC 9457
// answer and never changes once published.
const (
	TypeStaleToken       = "urn:fenceproxy:stale-token"
	TypeTokenRequired    = "urn:fenceproxy:token-required"
	TypeTokenMalformed   = "urn:fenceproxy:token-malformed"
	TypeBadRequest       = "urn:fenceproxy:bad-request"
	TypeStoreUnavailable = "urn:fenceproxy:store-unavailable"
	// The answers of a route with a sequence (the route key sequence).
	TypeStaleSequence     = "urn:fenceproxy:stale-sequence"
	TypeSequenceRequired  = "urn:fenceproxy:sequence-required"
	TypeSequenceMalformed = "urn:fenceproxy:sequence-malformed"
	// An admitted request that waited FENCE_DRAIN_TIMEOUT at the drain
	// barrier for older requests to end: 503, nothing forwarded.
	TypeDrainTimeout = "urn:fenceproxy:drain-timeout"
	// The store lost its identity record since this replica read it: its
	// marks may be gone, so nothing is admitted until an operator acts.
	TypeStoreLost = "urn:fenceproxy:store-lost"
	// Signed tokens (FENCE_TOKEN_KEYS_FILE): a token that is not a valid
	// JWS of the keys file's keys, and one whose res does not cover the
	// request's resource. Neither touches the mark.
	TypeTokenInvalid       = "urn:fenceproxy:token-invalid"
	TypeTokenWrongResource = "urn:fenceproxy:token-wrong-resource"
)

// problem is one RFC 9457 answer. Token, sequence and marks are decimal
// strings because JSON numbers lose precision past 2^53; an empty one is
// left out (not known for this answer).
type problem struct {
	Type          string `json:"type"`
	Title         string `json:"title"`
	Status        int    `json:"status"`
	Detail        string `json:"detail"`
	Route         string `json:"route,omitempty"`
	Resource      string `json:"resource,omitempty"`
	Token         string `json:"token,omitempty"`
	HighWaterMark string `json:"highWaterMark,omitempty"`
	// Sequence is the request's sequence; HighWaterSequence the mark's (the
	// greatest sequence admitted with token HighWaterMark).
	Sequence          string `json:"sequence,omitempty"`
	HighWaterSequence string `json:"highWaterSequence,omitempty"`
	// Forwarded is "false" on the answer of a request that was admitted
	// (the mark moved) but held back at the barrier: nothing of it reached
	// the upstream. A string, as the other members.
	Forwarded string `json:"forwarded,omitempty"`
	// ref is the refusal this problem answers (answers.go); zero for an
	// upstream failure.
	ref refusal
}

// retryAfterSeconds is sent with 503: long enough for a restarted Redis or a
// failover to settle, short enough not to stall a client that retries.
const retryAfterSeconds = "1"

// writeProblem writes p as application/problem+json. It is the only place
// that produces a refusal, so every refusal has the same shape.
func writeProblem(w http.ResponseWriter, p *problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", retryAfterSeconds)
	}
	body := append(p.marshal(), '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// marshal is p as JSON on one line (no newline at its end).
func (p *problem) marshal() []byte {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen for this struct of strings; keep the status anyway
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	return body
}

func formatUint(v uint64) string { return strconv.FormatUint(v, 10) }

// formatIf is formatUint(v) when ok, else "" (a member left out).
func formatIf(v uint64, ok bool) string {
	if !ok {
		return ""
	}
	return formatUint(v)
}
