package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
)

var sentinels = []error{
	client.ErrStaleToken, client.ErrTokenRequired, client.ErrTokenMalformed,
	client.ErrBadRequest, client.ErrStoreUnavailable, client.ErrNoToken,
	client.ErrStaleSequence, client.ErrSequenceRequired, client.ErrSequenceMalformed,
	client.ErrSequenceExhausted, client.ErrTokenInvalid, client.ErrTokenWrongResource,
	client.ErrDrainTimeout,
}

// Each refusal of the answers table (README.md) becomes its sentinel, with every field
// parsed, after http.Client.Do (which wraps it in *url.Error).
func TestTransportProblems(t *testing.T) {
	tests := []struct {
		name   string
		answer http.HandlerFunc
		want   client.ProblemError
		is     error // the one sentinel it matches; nil = none
	}{
		{
			name: "stale, mark at the top of uint64",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{
					Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409,
					Detail: "token 18446744073709551614 is older than the resource's high-water mark 18446744073709551615: a newer lease holder has written",
					Route:  "order-writes", Resource: "orders/42", Token: "18446744073709551614", HighWaterMark: "18446744073709551615",
				})
			},
			// 2^64-2 and 2^64-1 are the same float64: parsed exactly, they differ.
			want: client.ProblemError{
				Status: 409, Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token",
				Detail: "token 18446744073709551614 is older than the resource's high-water mark 18446744073709551615: a newer lease holder has written",
				Route:  "order-writes", Resource: "orders/42", Token: 18446744073709551614, HighWaterMark: 18446744073709551615, HasMark: true,
			},
			is: client.ErrStaleToken,
		},
		{
			name: "stale, mark zero is a mark",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409, Detail: "d", Token: "0", HighWaterMark: "0"})
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Detail: "d", HasMark: true},
			is:   client.ErrStaleToken,
		},
		{
			name: "token required",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:token-required", Title: "Fencing token required", Status: 428, Detail: "send it", Route: "default"})
			},
			want: client.ProblemError{Status: 428, Type: "urn:fenceproxy:token-required", Title: "Fencing token required", Detail: "send it", Route: "default"},
			is:   client.ErrTokenRequired,
		},
		{
			name: "token malformed",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:token-malformed", Title: "Malformed fencing token", Status: 400, Detail: "Fencing-Token: leading zero"})
			},
			want: client.ProblemError{Status: 400, Type: "urn:fenceproxy:token-malformed", Title: "Malformed fencing token", Detail: "Fencing-Token: leading zero"},
			is:   client.ErrTokenMalformed,
		},
		{
			name: "signed token invalid",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:token-invalid", Title: "Invalid fencing token", Status: 401, Detail: "Fencing-Token: expired at 2026-11-30T12:00:00Z (leeway 5s)", Route: "r"})
			},
			want: client.ProblemError{Status: 401, Type: "urn:fenceproxy:token-invalid", Title: "Invalid fencing token", Detail: "Fencing-Token: expired at 2026-11-30T12:00:00Z (leeway 5s)", Route: "r"},
			is:   client.ErrTokenInvalid,
		},
		{
			name: "signed token for another resource",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:token-wrong-resource", Title: "Fencing token for another resource", Status: 403, Detail: `the signed token is valid for "orders/7" only (its res claim)`, Route: "r", Resource: "orders/42", Token: "42"})
			},
			want: client.ProblemError{Status: 403, Type: "urn:fenceproxy:token-wrong-resource", Title: "Fencing token for another resource", Detail: `the signed token is valid for "orders/7" only (its res claim)`, Route: "r", Resource: "orders/42", Token: 42},
			is:   client.ErrTokenWrongResource,
		},
		{
			name: "bad request",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:bad-request", Title: "Resource cannot be named", Status: 400, Detail: "header X-Tenant absent", Route: "r", Token: "42"})
			},
			want: client.ProblemError{Status: 400, Type: "urn:fenceproxy:bad-request", Title: "Resource cannot be named", Detail: "header X-Tenant absent", Route: "r", Token: 42},
			is:   client.ErrBadRequest,
		},
		{
			name: "store unavailable, with Retry-After",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:store-unavailable", Title: "Fence store unavailable", Status: 503, Detail: "timeout", Resource: "default", Token: "42"})
			},
			want: client.ProblemError{Status: 503, Type: "urn:fenceproxy:store-unavailable", Title: "Fence store unavailable", Detail: "timeout", Resource: "default", Token: 42, RetryAfter: time.Second},
			is:   client.ErrStoreUnavailable,
		},
		{
			name: "stale sequence, members at the top of uint64",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{
					Type: "urn:fenceproxy:stale-sequence", Title: "Stale fencing sequence", Status: 409,
					Detail: "d", Route: "order-writes", Resource: "orders/42",
					Token: "18446744073709551615", HighWaterMark: "18446744073709551615",
					Sequence: "18446744073709551614", HighWaterSequence: "18446744073709551615",
				})
			},
			want: client.ProblemError{
				Status: 409, Type: "urn:fenceproxy:stale-sequence", Title: "Stale fencing sequence",
				Detail: "d", Route: "order-writes", Resource: "orders/42",
				Token: 18446744073709551615, HighWaterMark: 18446744073709551615, HasMark: true,
				Sequence: 18446744073709551614, HighWaterSequence: 18446744073709551615, HasHighWaterSequence: true,
			},
			is: client.ErrStaleSequence,
		},
		{
			name: "stale sequence, high-water sequence zero is one",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:stale-sequence", Status: 409, Token: "5", HighWaterMark: "5", Sequence: "0", HighWaterSequence: "0"})
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-sequence", Token: 5, HighWaterMark: 5, HasMark: true, HasHighWaterSequence: true},
			is:   client.ErrStaleSequence,
		},
		{
			name: "stale token with a sequence, the mark without one",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:stale-token", Status: 409, Token: "4", HighWaterMark: "5", Sequence: "9"})
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-token", Token: 4, HighWaterMark: 5, HasMark: true, Sequence: 9},
			is:   client.ErrStaleToken,
		},
		{
			name: "sequence required",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:sequence-required", Title: "Fencing sequence required", Status: 428, Detail: "send it", Route: "r", Token: "42"})
			},
			want: client.ProblemError{Status: 428, Type: "urn:fenceproxy:sequence-required", Title: "Fencing sequence required", Detail: "send it", Route: "r", Token: 42},
			is:   client.ErrSequenceRequired,
		},
		{
			name: "sequence malformed",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:sequence-malformed", Title: "Malformed fencing sequence", Status: 400, Detail: "Fencing-Sequence: leading zero", Token: "42"})
			},
			want: client.ProblemError{Status: 400, Type: "urn:fenceproxy:sequence-malformed", Title: "Malformed fencing sequence", Detail: "Fencing-Sequence: leading zero", Token: 42},
			is:   client.ErrSequenceMalformed,
		},
		{
			name: "drain timeout: admitted, never forwarded",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{
					Type: "urn:fenceproxy:drain-timeout", Title: "Older requests still in flight", Status: 503,
					Detail: "older requests for this resource were still in flight after 5s (FENCE_DRAIN_TIMEOUT); nothing was forwarded",
					Route:  "docs", Resource: "docs/1", Token: "42", Sequence: "7", Forwarded: "false",
				})
			},
			want: client.ProblemError{
				Status: 503, Type: "urn:fenceproxy:drain-timeout", Title: "Older requests still in flight",
				Detail: "older requests for this resource were still in flight after 5s (FENCE_DRAIN_TIMEOUT); nothing was forwarded",
				Route:  "docs", Resource: "docs/1", Token: 42, Sequence: 7, RetryAfter: time.Second,
			},
			is: client.ErrDrainTimeout,
		},
		{
			name: "sequences as bare JSON integers, or padded strings, are read from their text",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(409)
				_, _ = io.WriteString(w, `{"type":"urn:fenceproxy:stale-sequence","sequence":18446744073709551614,"highWaterSequence":" 18446744073709551615 "}`)
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-sequence", Sequence: 18446744073709551614, HighWaterSequence: 18446744073709551615, HasHighWaterSequence: true},
			is:   client.ErrStaleSequence,
		},
		{
			name: "unreadable sequences are none, the refusal stands",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(409)
				_, _ = io.WriteString(w, `{"type":"urn:fenceproxy:stale-sequence","sequence":"-1","highWaterSequence":"18446744073709551616"}`)
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-sequence"},
			is:   client.ErrStaleSequence,
		},
		{
			name: "a type this client does not know is still a refusal",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, wireProblem{Type: "urn:fenceproxy:from-the-future", Title: "New", Status: 403})
			},
			want: client.ProblemError{Status: 403, Type: "urn:fenceproxy:from-the-future", Title: "New"},
		},
		{
			name: "media type parameters and case",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "Application/Problem+JSON; charset=utf-8")
				w.WriteHeader(409)
				_, _ = io.WriteString(w, `{"type":"urn:fenceproxy:stale-token","status":409,"token":"1","highWaterMark":"2"}`)
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-token", Token: 1, HighWaterMark: 2, HasMark: true},
			is:   client.ErrStaleToken,
		},
		{
			name: "numbers as bare JSON integers are read from their text, not a float",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(409)
				_, _ = io.WriteString(w, `{"type":"urn:fenceproxy:stale-token","title":7,"token":18446744073709551614,"highWaterMark":18446744073709551615}`)
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-token", Token: 18446744073709551614, HighWaterMark: 18446744073709551615, HasMark: true},
			is:   client.ErrStaleToken,
		},
		{
			name: "an unreadable mark is no mark, the refusal stands",
			answer: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(409)
				_, _ = io.WriteString(w, `{"type":"urn:fenceproxy:stale-token","highWaterMark":"18446744073709551616"}`)
			},
			want: client.ProblemError{Status: 409, Type: "urn:fenceproxy:stale-token"},
			is:   client.ErrStaleToken,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, tt.answer)
			resp, err := do(t, rec, &client.Transport{}, client.WithToken(context.Background(), 1), nil)
			if resp != nil {
				t.Fatalf("got a response (%d) with err %v; a refusal is an error only", resp.StatusCode, err)
			}
			var ue *url.Error
			if !errors.As(err, &ue) {
				t.Fatalf("err = %T %v, want *url.Error from http.Client", err, err)
			}
			var pe *client.ProblemError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *ProblemError inside", err)
			}
			if !reflect.DeepEqual(*pe, tt.want) {
				t.Fatalf("ProblemError:\n got %+v\nwant %+v", *pe, tt.want)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tt.is) {
					t.Errorf("errors.Is(err, %v) = %v", s, got)
				}
			}
		})
	}
}

// The body of a refusal is read and closed: the caller gets no response to
// close.
func TestTransportClosesRefusalBody(t *testing.T) {
	body := newCloseTracker(`{"type":"urn:fenceproxy:stale-token","status":409,"token":"1","highWaterMark":"2"}`)
	tr := &client.Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{
			StatusCode: 409, Body: body, Request: r,
			Header: http.Header{"Content-Type": {"application/problem+json"}},
		}, nil
	})}
	req, _ := http.NewRequestWithContext(client.WithToken(context.Background(), 1), http.MethodPut, "http://proxy.invalid/", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("err = %v", err)
	}
	if !body.isClosed() {
		t.Fatal("the refusal's body was not closed")
	}
}

// Whatever is not a fenceproxy refusal reaches the caller as it was sent: the
// application's own conflicts and problems, the proxy's 502, bodies too large
// or not JSON.
func TestTransportPassesOtherResponsesThrough(t *testing.T) {
	huge := `{"type":"urn:fenceproxy:stale-token","detail":"` + strings.Repeat("x", 70<<10) + `"}`
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
	}{
		{"the app's own 409", 409, "text/plain; charset=utf-8", "order 42 was changed meanwhile\n"},
		{"fenceproxy's type but not problem+json", 409, "application/json", `{"type":"urn:fenceproxy:stale-token"}`},
		{"the app's own problem", 409, "application/problem+json", `{"type":"https://example.com/probs/out-of-stock","status":409}`},
		{"the proxy's upstream failure (about:blank)", 502, "application/problem+json", `{"type":"about:blank","title":"Bad Gateway","status":502}`},
		{"no type", 409, "application/problem+json", `{"title":"Conflict"}`},
		{"not JSON", 409, "application/problem+json", `<html>conflict</html>`},
		{"a type that only looks alike", 409, "application/problem+json", `{"type":"URN:FENCEPROXY:stale-token"}`},
		{"too large to be the proxy's", 409, "application/problem+json", huge},
		{"not an error status", 200, "application/problem+json", `{"type":"urn:fenceproxy:stale-token"}`},
		{"success", 200, "application/json", `{"id":42}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			resp, err := do(t, rec, &client.Transport{}, client.WithToken(context.Background(), 1), nil)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if got := drain(t, resp); got != tt.body {
				t.Fatalf("body changed: got %d bytes %.80q, want %d bytes %.80q", len(got), got, len(tt.body), tt.body)
			}
		})
	}
}

// CheckResponse serves callers with their own transport.
func TestCheckResponse(t *testing.T) {
	stale := func(w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, wireProblem{Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409, Token: "3", HighWaterMark: "4"})
	}
	appConflict := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(409)
		_, _ = io.WriteString(w, `{"type":"https://example.com/conflict"}`)
	}
	tests := []struct {
		name     string
		answer   http.HandlerFunc
		wantIs   error  // nil: CheckResponse returns nil
		wantBody string // when it returns nil
	}{
		{"stale", stale, client.ErrStaleToken, ""},
		{"the app's conflict", appConflict, nil, `{"type":"https://example.com/conflict"}`},
		{"ok", nil, nil, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, tt.answer)
			resp, err := rec.srv.Client().Post(rec.srv.URL, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			err = client.CheckResponse(resp)
			if tt.wantIs != nil {
				if !errors.Is(err, tt.wantIs) {
					t.Fatalf("CheckResponse = %v, want %v", err, tt.wantIs)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckResponse = %v, want nil", err)
			}
			if got := drain(t, resp); got != tt.wantBody {
				t.Fatalf("body = %q, want %q", got, tt.wantBody)
			}
		})
	}
	if err := client.CheckResponse(nil); err != nil {
		t.Fatalf("CheckResponse(nil) = %v", err)
	}
}

// A problem body that cannot be read is an error (not a refusal: nobody knows
// what it said), and the body is closed.
func TestCheckResponseReadError(t *testing.T) {
	broken := &brokenBody{}
	resp := &http.Response{StatusCode: 409, Header: http.Header{"Content-Type": {"application/problem+json"}}, Body: broken}
	err := client.CheckResponse(resp)
	var pe *client.ProblemError
	if err == nil || errors.As(err, &pe) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("CheckResponse = %v, want the read error", err)
	}
	if !broken.closed {
		t.Fatal("body not closed")
	}
}

type brokenBody struct{ closed bool }

func (b *brokenBody) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
func (b *brokenBody) Close() error             { b.closed = true; return nil }

func TestRetryAfter(t *testing.T) {
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		header   string
		min, max time.Duration
	}{
		{"", 0, 0},
		{"0", 0, 0},
		{"1", time.Second, time.Second},
		{" 120 ", 2 * time.Minute, 2 * time.Minute},
		{"-1", 0, 0},
		{"1.5", 0, 0},
		{"soon", 0, 0},
		{"18446744073709551615", time.Duration(1<<63 - 1), time.Duration(1<<63 - 1)},
		{future, 80 * time.Second, 90 * time.Second},
		{past, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			resp := &http.Response{
				StatusCode: 503,
				Header:     http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {tt.header}},
				Body:       io.NopCloser(strings.NewReader(`{"type":"urn:fenceproxy:store-unavailable"}`)),
			}
			var pe *client.ProblemError
			if !errors.As(client.CheckResponse(resp), &pe) {
				t.Fatal("not a refusal")
			}
			if pe.RetryAfter < tt.min || pe.RetryAfter > tt.max {
				t.Fatalf("RetryAfter = %v, want in [%v, %v]", pe.RetryAfter, tt.min, tt.max)
			}
		})
	}
}

func TestProblemErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		pe   client.ProblemError
		want string
	}{
		{
			name: "everything",
			pe: client.ProblemError{
				Status: 409, Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token",
				Detail: "token 5 is older than the resource's high-water mark 6: a newer lease holder has written",
				Route:  "order-writes", Resource: "orders/42",
			},
			want: `fenceproxy: 409 Stale fencing token: token 5 is older than the resource's high-water mark 6: a newer lease holder has written (route "order-writes", resource "orders/42")`,
		},
		{
			name: "no title: the type",
			pe:   client.ProblemError{Status: 428, Type: "urn:fenceproxy:token-required"},
			want: "fenceproxy: 428 urn:fenceproxy:token-required",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.pe.Error(); got != tt.want {
				t.Fatalf("Error() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
