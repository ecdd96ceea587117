package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/client"
)

func ExampleTransport() {
	// A stand-in for fenceproxy whose resource has seen token 8.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"type":"urn:fenceproxy:stale-token","title":"Stale fencing token","status":409,"token":%q,"highWaterMark":"8"}`,
			r.Header.Get("Fencing-Token"))
	}))
	defer proxy.Close()

	hc := &http.Client{Transport: &client.Transport{Base: proxy.Client().Transport}}
	ctx := client.WithToken(context.Background(), 7) // the token the lease was granted with
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, proxy.URL+"/orders/42", strings.NewReader(`{"state":"shipped"}`))
	resp, err := hc.Do(req)

	var pe *client.ProblemError
	switch {
	case errors.Is(err, client.ErrStaleToken) && errors.As(err, &pe):
		fmt.Printf("refused: token %d is older than mark %d; stop, the lease is lost\n", pe.Token, pe.HighWaterMark)
	case err != nil:
		fmt.Println("failed:", err)
	default:
		resp.Body.Close()
		fmt.Println("written:", resp.Status)
	}
	// Output: refused: token 7 is older than mark 8; stop, the lease is lost
}

func ExampleSequence() {
	// A stand-in for fenceproxy on a route with "sequence: required": it
	// admits (token, sequence) only above the mark, and the mark becomes it.
	var mu sync.Mutex
	var markToken, markSeq uint64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strconv.ParseUint(r.Header.Get("Fencing-Token"), 10, 64)
		seq, _ := strconv.ParseUint(r.Header.Get("Fencing-Sequence"), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		if tok < markToken || tok == markToken && seq <= markSeq {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"type":"urn:fenceproxy:stale-sequence","status":409,"token":"%d","highWaterMark":"%d","sequence":"%d","highWaterSequence":"%d"}`,
				tok, markToken, seq, markSeq)
			return
		}
		markToken, markSeq = tok, seq
		fmt.Fprintf(w, "applied %s as (%d, %d)", r.URL.Path, tok, seq)
	}))
	defer proxy.Close()

	hc := &http.Client{Transport: &client.Transport{Base: proxy.Client().Transport}}
	send := func(ctx context.Context, step string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, proxy.URL+"/orders/42/"+step, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(string(body))
		return nil
	}

	// One Sequence for the lease's token: each request the worker sends, one
	// at a time, is numbered above the last, so they apply in that order and
	// a late copy of an earlier one is refused.
	seq := &client.Sequence{}
	ctx := client.WithSequence(client.WithToken(context.Background(), 7), seq)
	_ = send(ctx, "reserve")

	// A step that may be retried takes its number once, so that a retry is
	// refused if the first attempt was applied, rather than applied twice.
	n, _ := seq.Next()
	charge := client.WithSequenceNumber(ctx, n)
	_ = send(charge, "charge")
	err := send(charge, "charge") // as if the first reply had been lost
	var pe *client.ProblemError
	if errors.Is(err, client.ErrStaleSequence) && errors.As(err, &pe) {
		fmt.Printf("retry refused: sequence %d is not above %d; the charge was applied once\n", pe.Sequence, pe.HighWaterSequence)
	}

	_ = send(ctx, "ship")
	// Output:
	// applied /orders/42/reserve as (7, 1)
	// applied /orders/42/charge as (7, 2)
	// retry refused: sequence 2 is not above 2; the charge was applied once
	// applied /orders/42/ship as (7, 3)
}
