package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Order under ordinary life, with real processes: fenceproxy binaries on one
// redis-server in front of a naive service.

// naiveService applies each write when it has finished working on it,
// whether or not anyone still waits for the answer (it never looks at its
// request's context), and logs what happens in order. A request with X-Work
// takes that long; one with X-Hold waits until release is closed.
type naiveService struct {
	*httptest.Server
	release chan struct{}

	mu     sync.Mutex
	events []string // "begin 41/-", "apply 41/-" (token/sequence)
	state  string   // the last write applied
}

func newNaiveService(t *testing.T) *naiveService {
	s := &naiveService{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		seq := r.Header.Get("Fencing-Sequence")
		if seq == "" {
			seq = "-"
		}
		id := r.Header.Get("Fencing-Token") + "/" + seq
		s.log("begin " + id)
		if d, err := time.ParseDuration(r.Header.Get("X-Work")); err == nil {
			time.Sleep(d)
		}
		if r.Header.Get("X-Hold") != "" {
			<-s.release
		}
		s.log("apply " + id)
		_, _ = io.WriteString(w, "applied "+id)
	}))
	t.Cleanup(func() {
		s.mu.Lock()
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		s.mu.Unlock()
		s.Close()
	})
	return s
}

func (s *naiveService) log(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	if id, ok := strings.CutPrefix(e, "apply "); ok {
		s.state = id
	}
}

func (s *naiveService) seen() ([]string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events), s.state
}

// A client that gives up. A's write (41) takes the service 2 s and A's
// client times out after 0.5 s; B's (42), through another replica, must
// reach the service only after fenceproxy's exchange for 41 has ended, and
// the service ends with 42's write. Before, A's timeout cancelled the
// exchange and released the barrier: 42 was applied while the service still
// worked on 41, which it applied last.
func TestClientGivesUpE2E(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	svc := newNaiveService(t)
	a := startReplica(t, bin, drainEnv(t, rs.URL(), svc.URL, "20s"))
	b := startReplica(t, bin, drainEnv(t, rs.URL(), svc.URL, "20s"))

	req, _ := http.NewRequest(http.MethodPut, a.data+"/docs/1", strings.NewReader("from 41"))
	req.Header.Set("Fencing-Token", "41")
	req.Header.Set("X-Work", "2s")
	if resp, err := (&http.Client{Timeout: 500 * time.Millisecond}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("41's client did not time out: %d", resp.StatusCode)
	}
	gaveUp := time.Now()
	wantStatus(t, sendPut(b.data, "/docs/1", "42", "from 42", false), 200, "42 through B")
	t.Logf("42 answered %v after 41's client gave up", time.Since(gaveUp))

	events, state := svc.seen()
	if want := []string{"begin 41/-", "apply 41/-", "begin 42/-", "apply 42/-"}; !slices.Equal(events, want) {
		t.Fatalf("the service saw %q, want %q", events, want)
	}
	if state != "42/-" {
		t.Fatalf("the service's final state is %s's write, want 42's", state)
	}
	if g := a.metric(t, `fenceproxy_client_gone_total{route="docs"}`); g != 1 {
		t.Fatalf("A: client_gone_total = %v, want 1", g)
	}
}

// drain-timeout through the client package: 42 (sequence 1) waits past
// FENCE_DRAIN_TIMEOUT behind 41, held at the service through the other
// replica; the client gets ErrDrainTimeout, nothing of 42 reached the
// service, and a retry with the same context (a Sequence) draws a new
// number and is admitted and applied once.
func TestDrainTimeoutRetryE2E(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	svc := newNaiveService(t)
	routes := writeRoutes(t, "routes:\n  - name: docs\n    path: /docs/{id}\n    resource: docs/{id}\n    sequence: required\n")
	env := func(extra ...string) map[string]string {
		e := map[string]string{"FENCE_UPSTREAM_URL": svc.URL, "FENCE_REDIS_URL": rs.URL(), "FENCE_ROUTES_FILE": routes, "FENCE_UPSTREAM_TIMEOUT": "20s"}
		for i := 0; i+1 < len(extra); i += 2 {
			e[extra[i]] = extra[i+1]
		}
		return e
	}
	a := startReplica(t, bin, env())
	b := startReplica(t, bin, env("FENCE_DRAIN_TIMEOUT", "300ms"))
	hc := &http.Client{Transport: &client.Transport{}}
	put := func(ctx context.Context, base string, hold bool) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/docs/1", strings.NewReader("w"))
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return errors.New(resp.Status)
		}
		return nil
	}

	held := make(chan error, 1)
	go func() {
		held <- put(client.WithSequence(client.WithToken(context.Background(), 41), &client.Sequence{}), a.data, true)
	}()
	waitFor(t, "41 at the service", func() bool { e, _ := svc.seen(); return len(e) == 1 })

	ctx42 := client.WithSequence(client.WithToken(context.Background(), 42), &client.Sequence{})
	err := put(ctx42, b.data, false)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrDrainTimeout) || !errors.As(err, &pe) || pe.Token != 42 || pe.Sequence != 1 {
		t.Fatalf("42 behind a held 41: %v, want ErrDrainTimeout for 42/1", err)
	}
	close(svc.release)
	if err := <-held; err != nil {
		t.Fatalf("41: %v", err)
	}
	if err := put(ctx42, b.data, false); err != nil {
		t.Fatalf("the retry of 42: %v", err)
	}
	events, state := svc.seen()
	if want := []string{"begin 41/1", "apply 41/1", "begin 42/2", "apply 42/2"}; !slices.Equal(events, want) {
		t.Fatalf("the service saw %q, want %q", events, want)
	}
	if state != "42/2" {
		t.Fatalf("final state %s, want 42/2", state)
	}
}
