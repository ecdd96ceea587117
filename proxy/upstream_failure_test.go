package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
)

const (
	detailNotSent = "the upstream could not be reached: the request was admitted but not sent to it"
	detailMaybe   = "the upstream did not answer: the request was admitted and may or may not have reached it"
	// The request's own upstream deadline (FENCE_UPSTREAM_TIMEOUT).
	detailDeadline = "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission) passed: the exchange was abandoned; " +
		"the request was admitted and may or may not have reached the upstream"
	detailDeadlineNotSent = "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission) passed before it was sent: nothing was forwarded"
)

// Each upstream failure maps to one answer: the status says whether it timed
// out, the detail whether the upstream can have seen the request, and only
// an error the transport marked as unsent claims it was not sent.
func TestUpstreamProblem(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name   string
		err    error
		status int
		detail string
	}{
		{"refused, marked by the transport", &notSentError{refused}, 502, detailNotSent},
		{"dial timed out, marked by the transport", &notSentError{dialTimeout}, 504, detailNotSent},
		{"dial refused on a retry, or from another RoundTripper", refused, 502, detailMaybe},
		{"connection closed without an answer", io.ErrUnexpectedEOF, 502, detailMaybe},
		{"read timed out", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, 504, detailMaybe},
		{"deadline exceeded", context.DeadlineExceeded, 504, detailDeadline},
		{"past the deadline mid-request", errPastDeadline, 504, detailDeadline},
		{"past the deadline before the first byte", &notSentError{errPastDeadline}, 504, detailDeadlineNotSent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := upstreamProblem(tc.err, "orders")
			if p.Status != tc.status || p.Detail != tc.detail || p.Route != "orders" ||
				p.Type != "about:blank" || p.Title != http.StatusText(tc.status) {
				t.Fatalf("%+v, want status %d, detail %q, route orders", p, tc.status, tc.detail)
			}
		})
	}
}

// The transport marks a failure as unsent exactly when no byte of the
// request can have left, on both of its paths. A dial refused on the retry
// after a reused connection failed is not such a failure: the first attempt
// wrote the request, and the upstream may have run it before it closed.
func TestUpstreamNotSentMarked(t *testing.T) {
	tests := []struct {
		name    string
		up      func(t *testing.T) string // returns the upstream URL
		first   bool                      // a first request succeeds and leaves its connection idle
		notSent bool
	}{
		{"connection refused", closedPort, false, true},
		{"closed without answering", func(t *testing.T) string {
			return newRawUpstream(t, func(*rawUpstream, int, *http.Request) string { return "" }).URL()
		}, false, false},
		{"reused connection closed without answering, then refused", func(t *testing.T) string {
			return newRawUpstream(t, func(u *rawUpstream, n int, req *http.Request) string {
				if n == 1 {
					return realAnswer(req)
				}
				_ = u.ln.Close() // the retry's dial is refused
				return ""
			}).URL()
		}, true, false},
	}
	paths := []struct {
		name string
		rt   func(*upstreamTransport, *http.Request) (*http.Response, error)
	}{
		{"inline", (*upstreamTransport).RoundTrip},
		{"fallback", (*upstreamTransport).roundTripFallback},
	}
	for _, tc := range tests {
		for _, path := range paths {
			t.Run(tc.name+"/"+path.name, func(t *testing.T) {
				url := tc.up(t)
				tr := NewTransport().(*upstreamTransport)
				t.Cleanup(tr.CloseIdleConnections)
				// GET without a body: both paths may send it twice.
				get := func() (*http.Response, error) {
					req, _ := http.NewRequest("GET", url+"/r", nil)
					return path.rt(tr, req)
				}
				if tc.first {
					resp, err := get()
					if err != nil {
						t.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				resp, err := get()
				if err == nil {
					resp.Body.Close()
					t.Fatal("the request succeeded")
				}
				var ns *notSentError
				if got := errors.As(err, &ns); got != tc.notSent {
					t.Fatalf("marked not sent = %v, want %v: %v", got, tc.notSent, err)
				}
				if tc.first {
					// The case is the retry's dial, not a read error.
					var oe *net.OpError
					if !errors.As(err, &oe) || oe.Op != "dial" {
						t.Fatalf("%v: want the retry's dial error", err)
					}
				}
			})
		}
	}
}

// A client whose request the upstream could not take gets a problem that
// names its route and says whether the upstream can have seen the request,
// on both paths of the transport.
func TestUpstreamFailureAnswer(t *testing.T) {
	closes := func(t *testing.T) string {
		return newRawUpstream(t, func(*rawUpstream, int, *http.Request) string { return "" }).URL()
	}
	tests := []struct {
		name   string
		up     func(t *testing.T) string
		detail string
	}{
		{"connection refused", closedPort, detailNotSent},
		{"closed after reading the request", closes, detailMaybe},
	}
	bodies := []struct{ path, body string }{
		{"inline", "payload"},
		{"fallback", strings.Repeat("b", maxInlineBody+1)},
	}
	for _, tc := range tests {
		for _, b := range bodies {
			t.Run(tc.name+"/"+b.path, func(t *testing.T) {
				front, _ := frontOf(t, tc.up(t))
				req, _ := http.NewRequest("PUT", front.URL+"/r", strings.NewReader(b.body))
				req.Header.Set("Fencing-Token", "1")
				resp, body := send(t, front.Client(), req)
				if resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d (%s), want 502", resp.StatusCode, body)
				}
				p := decodeProblem(t, resp, body)
				if p.Type != "about:blank" || p.Title != "Bad Gateway" || p.Detail != tc.detail || p.Route != "default" {
					t.Fatalf("%+v, want about:blank, Bad Gateway, detail %q, route default", p, tc.detail)
				}
			})
		}
	}
}
