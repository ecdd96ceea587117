package client_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/client"
)

// do sends a PUT through an http.Client whose transport is tr (its Base set
// to the recorder's own transport), as an application would.
func do(t *testing.T, rec *recorder, tr *client.Transport, ctx context.Context, prep func(*http.Request)) (*http.Response, error) {
	t.Helper()
	if tr.Base == nil {
		tr.Base = rec.srv.Client().Transport
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rec.srv.URL+"/orders/42", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(req)
	}
	hc := &http.Client{Transport: tr}
	resp, err := hc.Do(req)
	if resp != nil {
		t.Cleanup(func() { _ = resp.Body.Close() })
	}
	return resp, err
}

func TestTransportSetsTokenHeader(t *testing.T) {
	tests := []struct {
		name      string
		header    string // Transport.Header
		token     uint64
		prep      func(*http.Request)
		wantKey   string
		wantValue string
	}{
		{name: "zero", token: 0, wantKey: "Fencing-Token", wantValue: "0"},
		{name: "typical", token: 42, wantKey: "Fencing-Token", wantValue: "42"},
		{name: "max uint64", token: math.MaxUint64, wantKey: "Fencing-Token", wantValue: "18446744073709551615"},
		{
			name: "replaces the caller's value", token: 42,
			prep:    func(r *http.Request) { r.Header.Set("Fencing-Token", "7") },
			wantKey: "Fencing-Token", wantValue: "42",
		},
		{
			name: "replaces repeated values and other spellings", token: 42,
			prep: func(r *http.Request) {
				r.Header.Add("Fencing-Token", "1")
				r.Header.Add("Fencing-Token", "2")
				r.Header["fencing-token"] = []string{"3"}
				r.Header["FENCING-TOKEN"] = []string{"4, 5"}
			},
			wantKey: "Fencing-Token", wantValue: "42",
		},
		{name: "custom header, any case", header: "x-lease-TOKEN", token: 9, wantKey: "X-Lease-Token", wantValue: "9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			resp, err := do(t, rec, &client.Transport{Header: tt.header}, client.WithToken(context.Background(), tt.token), tt.prep)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			h := rec.lastHeader(t)
			if got := h.Values(tt.wantKey); !reflect.DeepEqual(got, []string{tt.wantValue}) {
				t.Fatalf("%s values = %q, want exactly [%q]", tt.wantKey, got, tt.wantValue)
			}
			if tt.wantKey != "Fencing-Token" && h.Get("Fencing-Token") != "" {
				t.Fatalf("the default header was sent too: %q", h.Values("Fencing-Token"))
			}
			if rec.bodies[0] != "payload" {
				t.Fatalf("body = %q", rec.bodies[0])
			}
		})
	}
}

// A signed token is sent byte for byte, replacing whatever the caller set,
// with the sequence when the context has one; the innermost of WithToken and
// WithSignedToken decides.
func TestTransportSendsSignedTokenUnchanged(t *testing.T) {
	// Shaped like a real one: base64url parts, with '-' and '_', and long.
	jws := "eyJhbGciOiJFZERTQSIsImtpZCI6ImsxIiwidHlwIjoiSldUIn0.eyJmZW5jZSI6IjE4NDQ2NzQ0MDczNzA5NTUxNjE1IiwiZXhwIjoxNzk2MDg0NTg4fQ.cQYLKcw4mdg0A6Y5tsrQ-MZI54uImK_9yFB2O3NS2np3Cy9tweNEW6tL4WgXtoqOzuw6vGuGbsQfb0pI9A3ZDg"
	seq := &client.Sequence{}
	tests := []struct {
		name      string
		ctx       context.Context
		prep      func(*http.Request)
		wantToken string
		wantSeq   []string // nil: no sequence header
	}{
		{name: "as given", ctx: client.WithSignedToken(context.Background(), jws), wantToken: jws},
		{
			name: "replaces the caller's values", ctx: client.WithSignedToken(context.Background(), jws),
			prep:      func(r *http.Request) { r.Header.Set("Fencing-Token", "7"); r.Header["fencing-token"] = []string{"8"} },
			wantToken: jws,
		},
		{name: "over a plain token", ctx: client.WithSignedToken(client.WithToken(context.Background(), 42), jws), wantToken: jws},
		{name: "under a plain token", ctx: client.WithToken(client.WithSignedToken(context.Background(), jws), 42), wantToken: "42"},
		{name: "with a sequence", ctx: client.WithSequence(client.WithSignedToken(context.Background(), jws), seq), wantToken: jws, wantSeq: []string{"1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			if _, err := do(t, rec, &client.Transport{}, tt.ctx, tt.prep); err != nil {
				t.Fatalf("Do: %v", err)
			}
			h := rec.lastHeader(t)
			if got := h.Values("Fencing-Token"); !reflect.DeepEqual(got, []string{tt.wantToken}) {
				t.Fatalf("Fencing-Token = %q, want exactly [%q]", got, tt.wantToken)
			}
			if got := h.Values("Fencing-Sequence"); !reflect.DeepEqual(got, tt.wantSeq) {
				t.Fatalf("Fencing-Sequence = %q, want %q", got, tt.wantSeq)
			}
		})
	}
}

// A signed token a header cannot carry unchanged is not sent (nor trimmed):
// the request fails in the caller, its body closed, nothing on the network,
// even when Transport.Optional would send a request without a token.
func TestTransportRefusesUnsendableSignedToken(t *testing.T) {
	tests := []struct {
		name, token, want string
	}{
		{"empty", "", "is empty"},
		{"surrounding space", " a.b.c", "byte 0"},
		{"trailing newline", "a.b.c\n", "byte 5"},
		{"header injection", "a.b.c\r\nX-Evil: 1", "byte 5"},
		{"non-ASCII", "a.b.Ã©", "byte 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			body := newCloseTracker("payload")
			_, err := do(t, rec, &client.Transport{Optional: true}, client.WithSignedToken(context.Background(), tt.token), func(r *http.Request) { r.Body = body })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one with %q", err, tt.want)
			}
			if n := rec.count(); n != 0 {
				t.Fatalf("the server received %d requests", n)
			}
			if !body.isClosed() {
				t.Fatal("the request body was not closed")
			}
		})
	}
}

// A request whose context has no token is refused before the network, and
// its body is closed, as http.RoundTripper's documentation requires.
func TestTransportNoToken(t *testing.T) {
	rec := newRecorder(t, nil)
	body := newCloseTracker("payload")
	resp, err := do(t, rec, &client.Transport{}, context.Background(), func(r *http.Request) {
		r.Body = body
		r.Header.Set("Fencing-Token", "5") // set by hand: not a token in the context
	})
	if resp != nil {
		t.Fatalf("got a response: %d", resp.StatusCode)
	}
	if !errors.Is(err, client.ErrNoToken) {
		t.Fatalf("err = %v, want ErrNoToken", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("err %T is not wrapped in *url.Error by http.Client", err)
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("the server received %d requests", n)
	}
	if !body.isClosed() {
		t.Fatal("the request body was not closed")
	}
}

func TestTransportOptional(t *testing.T) {
	tests := []struct {
		name     string
		ctx      context.Context
		prep     func(*http.Request)
		want     []string // values of Fencing-Token received; nil = absent
		optional bool
	}{
		{name: "no token: sent without the header", ctx: context.Background(), optional: true},
		{
			name: "no token: the caller's value is removed", ctx: context.Background(), optional: true,
			prep: func(r *http.Request) { r.Header.Set("Fencing-Token", "5"); r.Header["fencing-token"] = []string{"6"} },
		},
		{name: "a token is still sent", ctx: client.WithToken(context.Background(), 3), optional: true, want: []string{"3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			if _, err := do(t, rec, &client.Transport{Optional: tt.optional}, tt.ctx, tt.prep); err != nil {
				t.Fatalf("Do: %v", err)
			}
			if got := rec.lastHeader(t).Values("Fencing-Token"); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Fencing-Token = %q, want %q", got, tt.want)
			}
		})
	}
}

// The caller's request is read, never written: RoundTrip sends a clone. Many
// goroutines share one request so that the race detector sees any write.
func TestTransportDoesNotMutateRequest(t *testing.T) {
	req, err := http.NewRequestWithContext(client.WithToken(context.Background(), 42), http.MethodDelete, "http://upstream.invalid/orders/42", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Fencing-Token", "7")
	req.Header["fencing-token"] = []string{"8"}
	req.Header.Set("X-Other", "kept")
	before := req.Header.Clone()
	beforeURL := *req.URL

	var mu sync.Mutex
	var sent []http.Header
	tr := &client.Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r == req {
			t.Error("Base received the caller's request itself, not a clone")
		}
		mu.Lock()
		sent = append(sent, r.Header)
		mu.Unlock()
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
		})
	}
	wg.Wait()

	if !reflect.DeepEqual(req.Header, before) {
		t.Fatalf("request header changed:\n got %v\nwant %v", req.Header, before)
	}
	if *req.URL != beforeURL {
		t.Fatalf("request URL changed: %v", req.URL)
	}
	for _, h := range sent {
		want := http.Header{"Fencing-Token": {"42"}, "X-Other": {"kept"}}
		if !reflect.DeepEqual(h, want) {
			t.Fatalf("sent header = %v, want %v", h, want)
		}
	}
}

// A network failure is returned as it is, not turned into a refusal.
func TestTransportBaseError(t *testing.T) {
	boom := errors.New("connection refused")
	tr := &client.Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, boom })}
	req, _ := http.NewRequestWithContext(client.WithToken(context.Background(), 1), http.MethodPut, "http://upstream.invalid/", nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if resp != nil || !errors.Is(err, boom) {
		t.Fatalf("Do = %v, %v; want nil, %v", resp, err, boom)
	}
	for _, s := range []error{client.ErrStaleToken, client.ErrStoreUnavailable, client.ErrNoToken} {
		if errors.Is(err, s) {
			t.Fatalf("a network error matches %v", s)
		}
	}
}

// http.Client.CloseIdleConnections reaches Base through Transport.
func TestTransportCloseIdleConnections(t *testing.T) {
	var closed bool
	base := &idleCloser{RoundTripper: http.DefaultTransport, close: func() { closed = true }}
	(&http.Client{Transport: &client.Transport{Base: base}}).CloseIdleConnections()
	if !closed {
		t.Fatal("Base.CloseIdleConnections was not called")
	}
}

type idleCloser struct {
	http.RoundTripper
	close func()
}

func (c *idleCloser) CloseIdleConnections() { c.close() }

// drain reads and closes a response body, for tests that compare it.
func drain(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	_ = resp.Body.Close()
	return string(b)
}
