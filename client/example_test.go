package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

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
