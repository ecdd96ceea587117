package proxy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// applyingUpstream is a naive service: it applies each write when it has
// finished working on it, whether or not anyone still waits for the answer
// (it never looks at its request's context), and logs what happens in order.
type applyingUpstream struct {
	mu     sync.Mutex
	events []string // "begin 41", "apply 41", in the order they happened
	state  string   // the token of the last write applied
}

func (u *applyingUpstream) log(e string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.events = append(u.events, e)
	if tok, ok := strings.CutPrefix(e, "apply "); ok {
		u.state = tok
	}
}

func (u *applyingUpstream) snapshot() ([]string, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.events), u.state
}

// A client that gives up does not end its request's flight: the exchange
// with the upstream goes on (the response read and discarded) and only its
// end lets the newer request through. Before, the client's going cancelled
// the exchange and released the barrier at once, and 42 was applied while
// the service still worked on 41, which it then applied last.
func TestClientGoneStaysInFlight(t *testing.T) {
	tests := []struct {
		name string
		// serve41 is the service's work on 41: it applies it at the end.
		serve41 func(w http.ResponseWriter, u *applyingUpstream)
		// give41 sends 41 and gives up on it in its own way.
		give41 func(t *testing.T, f *fixture, u *applyingUpstream)
	}{
		{
			name: "client times out before the answer",
			serve41: func(w http.ResponseWriter, u *applyingUpstream) {
				time.Sleep(time.Second)
				u.log("apply 41")
				_, _ = io.WriteString(w, "stored 41")
			},
			give41: func(t *testing.T, f *fixture, u *applyingUpstream) {
				c := &http.Client{Timeout: 200 * time.Millisecond}
				req, _ := http.NewRequest(http.MethodPut, f.front.URL+"/docs/1", strings.NewReader("41"))
				req.Header.Set("Fencing-Token", "41")
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
					t.Fatalf("41's client did not time out: %d", resp.StatusCode)
				}
			},
		},
		{
			name: "client leaves in the middle of the answer",
			serve41: func(w http.ResponseWriter, u *applyingUpstream) {
				// A service that streams while it works, and applies the
				// write once it has said everything.
				_, _ = w.Write(make([]byte, 32<<10))
				w.(http.Flusher).Flush()
				time.Sleep(500 * time.Millisecond)
				for range 64 {
					if _, err := w.Write(make([]byte, 32<<10)); err != nil {
						break
					}
				}
				time.Sleep(300 * time.Millisecond)
				u.log("apply 41")
			},
			give41: func(t *testing.T, f *fixture, u *applyingUpstream) {
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				req, _ := http.NewRequest(http.MethodPut, f.front.URL+"/docs/1", strings.NewReader("41"))
				req.Header.Set("Fencing-Token", "41")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, make([]byte, 1024)); err != nil {
					t.Fatal(err)
				}
				resp.Body.Close() // before the end: the connection is closed
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, drainRoutes, memstore.New())
			u := &applyingUpstream{}
			f.up.handle(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				tok := r.Header.Get("Fencing-Token")
				u.log("begin " + tok)
				if tok == "41" {
					tt.serve41(w, u)
					return
				}
				u.log("apply " + tok)
				_, _ = io.WriteString(w, "stored "+tok)
			})
			tt.give41(t, f, u)
			answer(t, f.send("/docs/1", "42", false), http.StatusOK)

			events, state := u.snapshot()
			if want := []string{"begin 41", "apply 41", "begin 42", "apply 42"}; !slices.Equal(events, want) {
				t.Fatalf("the service saw %q, want %q: 42 began while 41 was still being worked on", events, want)
			}
			if state != "42" {
				t.Fatalf("the service's final state is %s's write, want 42's", state)
			}
			if got := testutil.ToFloat64(f.metrics.clientGone.WithLabelValues("docs")); got != 1 {
				t.Fatalf("fenceproxy_client_gone_total{route=docs} = %v, want 1", got)
			}
		})
	}
}

// A client already gone when its request passes the barrier: nothing is
// sent, and the request leaves the barrier.
func TestClientGoneWhileWaitingIsNotForwarded(t *testing.T) {
	f := newFixture(t, drainRoutes, memstore.New())
	h := holdingUpstream(f)
	held := f.send("/docs/1", "41", true)
	h.arrives(t, "41", 5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, f.front.URL+"/docs/1", strings.NewReader("v"))
	req.Header.Set("Fencing-Token", "42")
	if resp, err := f.front.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("42's client did not give up: %d", resp.StatusCode)
	}
	// 41 ends only once the proxy has seen 42's client go: the two at once
	// would be a race of which the proxy sees first.
	gone := testutil.ToFloat64(f.metrics.clientGone.WithLabelValues("docs"))
	for stop := time.Now().Add(5 * time.Second); gone == 0 && time.Now().Before(stop); {
		time.Sleep(10 * time.Millisecond)
		gone = testutil.ToFloat64(f.metrics.clientGone.WithLabelValues("docs"))
	}
	if gone != 1 {
		t.Fatalf("fenceproxy_client_gone_total{route=docs} = %v, want 1", gone)
	}
	close(h.release)
	answer(t, held, http.StatusOK)
	h.nothingArrives(t, 300*time.Millisecond, "42, whose client left while it waited")
	answer(t, f.send("/docs/1", "43", false), http.StatusOK)
	h.arrives(t, "43", 5*time.Second)
}
