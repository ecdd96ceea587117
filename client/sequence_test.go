package client_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/client"
)

// A Sequence gives after+1, after+2, ... and, past math.MaxUint64, only
// ErrSequenceExhausted.
func TestSequenceNext(t *testing.T) {
	const exhausted = 0 // in want: Next returns ErrSequenceExhausted
	tests := []struct {
		name string
		seq  *client.Sequence
		want []uint64
	}{
		{name: "zero value starts at 1", seq: &client.Sequence{}, want: []uint64{1, 2, 3}},
		{name: "NewSequence(0) is the zero value", seq: client.NewSequence(0), want: []uint64{1, 2}},
		{name: "resumes after a given number", seq: client.NewSequence(41), want: []uint64{42, 43}},
		{
			name: "gives math.MaxUint64, then is exhausted for good",
			seq:  client.NewSequence(math.MaxUint64 - 2),
			want: []uint64{math.MaxUint64 - 1, math.MaxUint64, exhausted, exhausted},
		},
		{name: "NewSequence(math.MaxUint64) is exhausted", seq: client.NewSequence(math.MaxUint64), want: []uint64{exhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				got, err := tt.seq.Next()
				if want == exhausted {
					if !errors.Is(err, client.ErrSequenceExhausted) || got != 0 {
						t.Fatalf("draw %d: Next = %d, %v; want 0, ErrSequenceExhausted", i, got, err)
					}
					continue
				}
				if err != nil || got != want {
					t.Fatalf("draw %d: Next = %d, %v; want %d", i, got, err, want)
				}
			}
		})
	}
}

// Concurrent callers of one Sequence never get the same number, each sees its
// own numbers increase, and together they get exactly 1..n: no number is lost
// or given twice.
func TestSequenceConcurrentNext(t *testing.T) {
	const goroutines, draws = 16, 1000
	seq := &client.Sequence{}
	got := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range draws {
				n, err := seq.Next()
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], n)
			}
		})
	}
	wg.Wait()

	var all []uint64
	for g, mine := range got {
		if !slices.IsSorted(mine) || len(slices.Compact(slices.Clone(mine))) != len(mine) {
			t.Fatalf("goroutine %d drew numbers that do not increase: %v", g, mine)
		}
		all = append(all, mine...)
	}
	slices.Sort(all)
	for i, n := range all {
		if n != uint64(i+1) {
			t.Fatalf("sorted draws[%d] = %d, want %d: a number was given twice or skipped", i, n, i+1)
		}
	}
}

// Transport sends exactly one sequence header line per request, with a fresh
// number per request from a Sequence, the fixed number of WithSequenceNumber,
// or none; whatever the caller set by hand is never sent.
func TestTransportSendsSequence(t *testing.T) {
	tok := client.WithToken(context.Background(), 42)
	tests := []struct {
		name     string
		tr       client.Transport
		ctx      context.Context // shared by the case's requests
		prep     func(*http.Request)
		sends    int
		wantName string   // the sequence header's name
		want     []string // its value in each request received; "" = absent
	}{
		{
			name:  "a fresh, greater number for each request",
			ctx:   client.WithSequence(tok, &client.Sequence{}),
			sends: 3, wantName: "Fencing-Sequence", want: []string{"1", "2", "3"},
		},
		{
			name:  "a resumed sequence",
			ctx:   client.WithSequence(tok, client.NewSequence(99)),
			sends: 2, wantName: "Fencing-Sequence", want: []string{"100", "101"},
		},
		{
			name:  "a fixed number is sent as it is, each time",
			ctx:   client.WithSequenceNumber(tok, 7),
			sends: 2, wantName: "Fencing-Sequence", want: []string{"7", "7"},
		},
		{
			name:  "fixed zero",
			ctx:   client.WithSequenceNumber(tok, 0),
			sends: 1, wantName: "Fencing-Sequence", want: []string{"0"},
		},
		{
			name:  "fixed max uint64",
			ctx:   client.WithSequenceNumber(tok, math.MaxUint64),
			sends: 1, wantName: "Fencing-Sequence", want: []string{"18446744073709551615"},
		},
		{
			name: "replaces the caller's values under any spelling",
			ctx:  client.WithSequence(tok, &client.Sequence{}),
			prep: func(r *http.Request) {
				r.Header.Add("Fencing-Sequence", "98")
				r.Header.Add("Fencing-Sequence", "99")
				r.Header["fencing-sequence"] = []string{"97"}
				r.Header["FENCING-SEQUENCE"] = []string{"5, 6"}
			},
			sends: 2, wantName: "Fencing-Sequence", want: []string{"1", "2"},
		},
		{
			name:  "custom header, any case",
			tr:    client.Transport{SequenceHeader: "x-lease-SEQ"},
			ctx:   client.WithSequence(tok, &client.Sequence{}),
			prep:  func(r *http.Request) { r.Header["x-lease-seq"] = []string{"9"} },
			sends: 2, wantName: "X-Lease-Seq", want: []string{"1", "2"},
		},
		{
			name: "no sequence in the context: none sent, the caller's removed",
			ctx:  tok,
			prep: func(r *http.Request) {
				r.Header.Set("Fencing-Sequence", "5")
				r.Header["fencing-sequence"] = []string{"6"}
			},
			sends: 1, wantName: "Fencing-Sequence", want: []string{""},
		},
		{
			name:  "innermost wins: a fixed number inside a Sequence",
			ctx:   client.WithSequenceNumber(client.WithSequence(tok, &client.Sequence{}), 11),
			sends: 2, wantName: "Fencing-Sequence", want: []string{"11", "11"},
		},
		{
			name:  "innermost wins: a nil Sequence clears an enclosing one",
			ctx:   client.WithSequence(client.WithSequenceNumber(tok, 11), nil),
			sends: 1, wantName: "Fencing-Sequence", want: []string{""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			for range tt.sends {
				tr := tt.tr
				if _, err := do(t, rec, &tr, tt.ctx, tt.prep); err != nil {
					t.Fatalf("Do: %v", err)
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.headers) != len(tt.want) {
				t.Fatalf("received %d requests, want %d", len(rec.headers), len(tt.want))
			}
			for i, want := range tt.want {
				h := rec.headers[i]
				if got := h.Values("Fencing-Token"); !reflect.DeepEqual(got, []string{"42"}) {
					t.Fatalf("request %d: Fencing-Token = %q, want exactly [42]", i, got)
				}
				var wantValues []string
				if want != "" {
					wantValues = []string{want}
				}
				if got := h.Values(tt.wantName); !reflect.DeepEqual(got, wantValues) {
					t.Fatalf("request %d: %s = %q, want %q", i, tt.wantName, got, wantValues)
				}
				for k, v := range h { // no other line under another spelling, nor the default name
					if k != tt.wantName && (strings.EqualFold(k, tt.wantName) || strings.EqualFold(k, "Fencing-Sequence")) {
						t.Fatalf("request %d: %s = %q was sent too", i, k, v)
					}
				}
			}
		})
	}
}

// Every send is a fresh draw: a request that http.Client re-sends on a
// redirect, and a *http.Request the caller sends again, get a new number from
// a Sequence; with WithSequenceNumber they carry the same one.
func TestTransportSequenceRetries(t *testing.T) {
	tok := client.WithToken(context.Background(), 42)
	tests := []struct {
		name     string
		ctx      context.Context
		redirect bool // the server answers the first request with 307
		want     []string
	}{
		{
			name: "redirect, Sequence: fresh number", redirect: true,
			ctx:  client.WithSequence(tok, &client.Sequence{}),
			want: []string{"1", "2"},
		},
		{
			name: "the same request sent twice, Sequence: fresh number",
			ctx:  client.WithSequence(tok, &client.Sequence{}),
			want: []string{"1", "2"},
		},
		{
			name: "redirect, fixed number: the same", redirect: true,
			ctx:  client.WithSequenceNumber(tok, 5),
			want: []string{"5", "5"},
		},
		{
			name: "the same request sent twice, fixed number: the same",
			ctx:  client.WithSequenceNumber(tok, 5),
			want: []string{"5", "5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []string
			var mu sync.Mutex
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get("Fencing-Sequence"))
				first := len(seen) == 1
				mu.Unlock()
				if tt.redirect && first {
					http.Redirect(w, r, "/orders/42?again", http.StatusTemporaryRedirect)
				}
			})
			hc := &http.Client{Transport: &client.Transport{Base: rec.srv.Client().Transport}}
			req, err := http.NewRequestWithContext(tt.ctx, http.MethodPut, rec.srv.URL+"/orders/42", strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			sends := 2
			if tt.redirect {
				sends = 1 // http.Client sends the second itself
			}
			for i := range sends {
				if i > 0 {
					req.Body, _ = req.GetBody() // a caller re-sending its request rewinds the body
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				drain(t, resp)
			}
			if !reflect.DeepEqual(seen, tt.want) {
				t.Fatalf("sequences received = %q, want %q", seen, tt.want)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for i, b := range rec.bodies {
				if b != "payload" {
					t.Fatalf("request %d: body = %q", i, b)
				}
			}
		})
	}
}

// What the retry rule means at the proxy: a retry of an admitted request with
// a fresh number is admitted again (applied twice); with the number pinned it
// is refused as a stale sequence (applied once).
func TestSequenceRetryAtTheFence(t *testing.T) {
	tok := client.WithToken(context.Background(), 42)
	tests := []struct {
		name      string
		ctx       context.Context
		wantErr   error // of the second send
		wantAdmit []string
	}{
		{
			name:      "Sequence: the retry is a new request",
			ctx:       client.WithSequence(tok, &client.Sequence{}),
			wantAdmit: []string{"42/1", "42/2"},
		},
		{
			name:      "pinned number: the retry is refused",
			ctx:       client.WithSequenceNumber(tok, 1),
			wantErr:   client.ErrStaleSequence,
			wantAdmit: []string{"42/1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := newFence(t)
			hc := &http.Client{Transport: &client.Transport{Base: srv.Client().Transport}}
			req, _ := http.NewRequestWithContext(tt.ctx, http.MethodDelete, srv.URL+"/orders/42", nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("first send: %v", err)
			}
			drain(t, resp)
			resp, err = hc.Do(req) // the reply was lost, say, and the caller retries
			if resp != nil {
				drain(t, resp)
			}
			if !errors.Is(err, tt.wantErr) { // errors.Is(err, nil) is err == nil
				t.Fatalf("second send: err = %v, want %v", err, tt.wantErr)
			}
			if got := f.log(); !reflect.DeepEqual(got, tt.wantAdmit) {
				t.Fatalf("admitted %q, want %q", got, tt.wantAdmit)
			}
		})
	}
}

// A request answered drain-timeout was admitted (the mark moved to its
// pair) and never applied: the client returns ErrDrainTimeout, and a retry
// through a Sequence draws a new number and is admitted, applied once. A
// retry with a pinned number is refused as a stale sequence although the
// request never applied: a pinned number must be renumbered
// (ProblemError.Sequence says which was spent).
func TestDrainTimeoutRetryAtTheFence(t *testing.T) {
	tok := client.WithToken(context.Background(), 42)
	tests := []struct {
		name      string
		ctx       context.Context
		wantErr   error // of the retry
		wantAdmit []string
	}{
		{name: "Sequence: the retry draws a new number", ctx: client.WithSequence(tok, &client.Sequence{}), wantAdmit: []string{"42/2"}},
		{name: "pinned number: spent by the held-back send", ctx: client.WithSequenceNumber(tok, 1), wantErr: client.ErrStaleSequence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := newFence(t)
			f.holdBack = 1
			hc := &http.Client{Transport: &client.Transport{Base: srv.Client().Transport}}
			req, _ := http.NewRequestWithContext(tt.ctx, http.MethodPut, srv.URL+"/orders/42", nil)
			_, err := hc.Do(req)
			var pe *client.ProblemError
			if !errors.Is(err, client.ErrDrainTimeout) || !errors.As(err, &pe) || pe.Sequence != 1 || pe.RetryAfter <= 0 {
				t.Fatalf("first send: err = %v, want ErrDrainTimeout for sequence 1 with a Retry-After", err)
			}
			if errors.Is(err, client.ErrStoreUnavailable) || errors.Is(err, client.ErrStaleSequence) {
				t.Fatalf("first send: %v matches another sentinel", err)
			}
			resp, err := hc.Do(req) // the retry, with the same context
			if resp != nil {
				drain(t, resp)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("retry: err = %v, want %v", err, tt.wantErr)
			}
			if got := f.log(); !reflect.DeepEqual(got, tt.wantAdmit) {
				t.Fatalf("applied %q, want %q", got, tt.wantAdmit)
			}
		})
	}
}

// A request is not sent, its body is closed and no number is spent when it
// cannot carry its sequence: no token (a sequence orders the requests of one
// token, so Optional does not let it go), the counter is exhausted, or the
// two header names are one.
func TestTransportSequenceRefusedBeforeSending(t *testing.T) {
	tests := []struct {
		name     string
		tr       client.Transport
		seq      *client.Sequence
		ctx      func(context.Context, *client.Sequence) context.Context
		wantErr  error  // matched with errors.Is, when not nil
		wantText string // in the error's text, when wantErr is nil
		wantNext uint64 // seq.Next after the refusal
	}{
		{
			name: "Sequence without a token",
			seq:  &client.Sequence{},
			ctx:  func(c context.Context, s *client.Sequence) context.Context { return client.WithSequence(c, s) },
			// Nothing drawn: the next number is still the first.
			wantErr: client.ErrNoToken, wantNext: 1,
		},
		{
			name:    "Sequence without a token, Optional",
			tr:      client.Transport{Optional: true},
			seq:     &client.Sequence{},
			ctx:     func(c context.Context, s *client.Sequence) context.Context { return client.WithSequence(c, s) },
			wantErr: client.ErrNoToken, wantNext: 1,
		},
		{
			name:    "a fixed number without a token, Optional",
			tr:      client.Transport{Optional: true},
			seq:     &client.Sequence{},
			ctx:     func(c context.Context, _ *client.Sequence) context.Context { return client.WithSequenceNumber(c, 3) },
			wantErr: client.ErrNoToken, wantNext: 1,
		},
		{
			name: "exhausted",
			seq:  client.NewSequence(math.MaxUint64),
			ctx: func(c context.Context, s *client.Sequence) context.Context {
				return client.WithSequence(client.WithToken(c, 42), s)
			},
			wantErr: client.ErrSequenceExhausted,
		},
		{
			name: "the sequence header is the token header",
			tr:   client.Transport{Header: "X-Fence", SequenceHeader: "x-FENCE"},
			seq:  &client.Sequence{},
			ctx: func(c context.Context, s *client.Sequence) context.Context {
				return client.WithSequence(client.WithToken(c, 42), s)
			},
			wantText: `SequenceHeader "X-Fence" is the token header`, wantNext: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			body := newCloseTracker("payload")
			tr := tt.tr
			resp, err := do(t, rec, &tr, tt.ctx(context.Background(), tt.seq), func(r *http.Request) { r.Body = body })
			if resp != nil {
				t.Fatalf("got a response: %d", resp.StatusCode)
			}
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && (err == nil || !strings.Contains(err.Error(), tt.wantText)):
				t.Fatalf("err = %v, want one saying %q", err, tt.wantText)
			}
			if n := rec.count(); n != 0 {
				t.Fatalf("the server received %d requests", n)
			}
			if !body.isClosed() {
				t.Fatal("the request body was not closed")
			}
			if next, _ := tt.seq.Next(); next != tt.wantNext {
				t.Fatalf("after the refusal Next = %d, want %d", next, tt.wantNext)
			}
		})
	}
}

// Without a token or a sequence in its context, an Optional Transport sends
// neither header, also not the ones the caller set by hand.
func TestTransportOptionalSendsNoSequence(t *testing.T) {
	rec := newRecorder(t, nil)
	_, err := do(t, rec, &client.Transport{Optional: true}, context.Background(), func(r *http.Request) {
		r.Header.Set("Fencing-Token", "5")
		r.Header.Set("Fencing-Sequence", "6")
		r.Header["fencing-sequence"] = []string{"7"}
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	for k, v := range rec.lastHeader(t) {
		if strings.EqualFold(k, "Fencing-Token") || strings.EqualFold(k, "Fencing-Sequence") {
			t.Fatalf("%s = %q was sent", k, v)
		}
	}
}

// Requests sent concurrently with one Sequence each carry exactly one number,
// and no two carry the same: together, exactly 1..n.
func TestTransportConcurrentSequence(t *testing.T) {
	const goroutines, each = 16, 8
	rec := newRecorder(t, nil)
	tr := &client.Transport{Base: rec.srv.Client().Transport}
	hc := &http.Client{Transport: tr}
	ctx := client.WithSequence(client.WithToken(context.Background(), 42), &client.Sequence{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, rec.srv.URL+"/orders/42", strings.NewReader("x"))
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	hc.CloseIdleConnections()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []uint64
	for i, h := range rec.headers {
		v := h.Values("Fencing-Sequence")
		if len(v) != 1 {
			t.Fatalf("request %d: Fencing-Sequence = %q, want one line", i, v)
		}
		n, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			t.Fatalf("request %d: Fencing-Sequence %q: %v", i, v[0], err)
		}
		got = append(got, n)
	}
	slices.Sort(got)
	for i, n := range got {
		if n != uint64(i+1) {
			t.Fatalf("sorted sequences received[%d] = %d, want %d (all: %v)", i, n, i+1, got)
		}
	}
	if len(got) != goroutines*each {
		t.Fatalf("received %d requests, want %d", len(got), goroutines*each)
	}
}

// The caveat of the docs, shown: requests sent concurrently with one Sequence
// may reach the proxy out of order. Each is then either admitted, in
// increasing order, or refused as a stale sequence (a later one of the same
// token landed first), never anything else, and never as a stale token.
func TestConcurrentSendsAtTheFence(t *testing.T) {
	const goroutines, each = 16, 8
	f, srv := newFence(t)
	hc := &http.Client{Transport: &client.Transport{Base: srv.Client().Transport}}
	ctx := client.WithSequence(client.WithToken(context.Background(), 42), &client.Sequence{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, stale := 0, 0
	for range goroutines {
		wg.Go(func() {
			for range each {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/orders/42", strings.NewReader("x"))
				resp, err := hc.Do(req)
				mu.Lock()
				switch {
				case err == nil:
					admitted++
					_ = resp.Body.Close()
				case errors.Is(err, client.ErrStaleSequence):
					stale++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	hc.CloseIdleConnections()

	log := f.log()
	if admitted+stale != goroutines*each || len(log) != admitted {
		t.Fatalf("admitted %d (fence logged %d), stale %d, of %d", admitted, len(log), stale, goroutines*each)
	}
	prev := uint64(0)
	for _, e := range log {
		n, _ := strconv.ParseUint(strings.TrimPrefix(e, "42/"), 10, 64)
		if n <= prev {
			t.Fatalf("the fence admitted %d after %d: %v", n, prev, log)
		}
		prev = n
	}
	t.Logf("%d admitted, %d refused as stale sequences", admitted, stale)
}

// The problem answers of a route with a sequence become their sentinels with
// every member parsed; see TestTransportProblems for the exact parsing.
func TestSequenceProblemsAtTheFence(t *testing.T) {
	f, srv := newFence(t)
	hc := &http.Client{Transport: &client.Transport{Base: srv.Client().Transport}}
	send := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, srv.URL+"/orders/42", nil)
		resp, err := hc.Do(req)
		if resp != nil {
			drain(t, resp)
		}
		return err
	}
	tok := func(n uint64) context.Context { return client.WithToken(context.Background(), n) }

	if err := send(client.WithSequenceNumber(tok(42), 7)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ctx  context.Context
		is   error
		want client.ProblemError
	}{
		{
			name: "equal token, lower sequence", ctx: client.WithSequenceNumber(tok(42), 3), is: client.ErrStaleSequence,
			want: client.ProblemError{
				Status: 409, Type: "urn:fenceproxy:stale-sequence", Title: "Stale fencing sequence", Resource: "default",
				Token: 42, HighWaterMark: 42, HasMark: true, Sequence: 3, HighWaterSequence: 7, HasHighWaterSequence: true,
			},
		},
		{
			name: "equal token, equal sequence", ctx: client.WithSequenceNumber(tok(42), 7), is: client.ErrStaleSequence,
			want: client.ProblemError{
				Status: 409, Type: "urn:fenceproxy:stale-sequence", Title: "Stale fencing sequence", Resource: "default",
				Token: 42, HighWaterMark: 42, HasMark: true, Sequence: 7, HighWaterSequence: 7, HasHighWaterSequence: true,
			},
		},
		{
			name: "older token, greater sequence: stale token", ctx: client.WithSequenceNumber(tok(41), 100), is: client.ErrStaleToken,
			want: client.ProblemError{
				Status: 409, Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Resource: "default",
				Token: 41, HighWaterMark: 42, HasMark: true, Sequence: 100, HighWaterSequence: 7, HasHighWaterSequence: true,
			},
		},
		{
			name: "no sequence", ctx: tok(42), is: client.ErrSequenceRequired,
			want: client.ProblemError{Status: 428, Type: "urn:fenceproxy:sequence-required", Title: "Fencing sequence required", Token: 42},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := send(tt.ctx)
			var pe *client.ProblemError
			if !errors.Is(err, tt.is) || !errors.As(err, &pe) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			if !reflect.DeepEqual(*pe, tt.want) {
				t.Fatalf("ProblemError:\n got %+v\nwant %+v", *pe, tt.want)
			}
		})
	}
	// A newer token is admitted whatever its sequence, and numbering starts
	// again under it.
	if err := send(client.WithSequence(tok(43), &client.Sequence{})); err != nil {
		t.Fatalf("newer token: %v", err)
	}
	if got, want := f.log(), []string{"42/7", "43/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("admitted %q, want %q", got, want)
	}
}
