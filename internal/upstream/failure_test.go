package upstream

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// The transport marks a failure as unsent exactly when no byte of the
// request can have left, on both of its paths. A dial refused on the retry
// after a reused connection failed is not such a failure: the first attempt
// wrote the request, and the upstream may have run it before it closed.
func TestNotSentMarked(t *testing.T) {
	tests := []struct {
		name    string
		up      func(t *testing.T) string // returns the upstream URL
		first   bool                      // a first request succeeds and leaves its connection idle
		notSent bool
	}{
		{"connection refused", wiretest.ClosedPort, false, true},
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
		rt   func(*Transport, *http.Request) (*http.Response, error)
	}{
		{"inline", (*Transport).RoundTrip},
		{"fallback", func(t *Transport, r *http.Request) (*http.Response, error) { return t.roundTripFallback(r, nil) }},
	}
	for _, tc := range tests {
		for _, path := range paths {
			t.Run(tc.name+"/"+path.name, func(t *testing.T) {
				url := tc.up(t)
				tr := New(Options{})
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
				var ns *NotSentError
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
