package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// fenceproxy authz runs without an upstream, answers as the proxy decides,
// and counts on the same metrics; a routes reload applies to it too.
func TestAuthzEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	routes := writeRoutes(t, "routes:\n  - {name: orders, path: '/orders/{id}', resource: 'orders/{id}'}\n")
	grpcAddr := freePort(t)
	r := startReplica(t, bin, map[string]string{
		"FENCE_BOLT_PATH":       filepath.Join(t.TempDir(), "marks.db"),
		"FENCE_ROUTES_FILE":     routes,
		"FENCE_AUTHZ_GRPC_ADDR": grpcAddr,
	}, "authz")
	ask := func(method, uri, token string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", r.data+"/auth", nil)
		req.Header.Set("X-Original-Method", method)
		req.Header.Set("X-Original-URI", uri)
		if token != "" {
			req.Header.Set("Fencing-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for _, tt := range []struct {
		method, uri, token string
		status             int
		decision           string
	}{
		{"PUT", "/orders/1", "5", 200, "admitted"},
		{"PUT", "/orders/1", "4", 409, "stale"},
		{"GET", "/orders/1", "", 200, "unfenced"},
		{"DELETE", "/orders/1?x=1", "", 428, "missing"},
	} {
		status, h := ask(tt.method, tt.uri, tt.token)
		if status != tt.status || h.Get("Fence-Decision") != tt.decision {
			t.Errorf("%s %s token %q: %d %s, want %d %s", tt.method, tt.uri, tt.token, status, h.Get("Fence-Decision"), tt.status, tt.decision)
		}
		if status != 200 && !strings.Contains(h.Get("Fence-Problem"), `"status":`) {
			t.Errorf("%s %s: no Fence-Problem header", tt.method, tt.uri)
		}
	}
	if n := r.metric(t, `fenceproxy_requests_total{decision="stale",route="orders"}`); n != 1 {
		t.Errorf("stale counted %v, want 1", n)
	}
	if !strings.Contains(r.logs.String(), `"mode":"authz"`) {
		t.Errorf("the start line does not say authz:\n%s", r.logs)
	}

	// Envoy's gRPC Check on the same marks: 5 is the mark of orders/1.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := authv3.NewAuthorizationClient(conn)
	check := func(method, path, token string) *authv3.CheckResponse {
		t.Helper()
		headers := map[string]string{}
		if token != "" {
			headers["fencing-token"] = token
		}
		resp, err := client.Check(t.Context(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: method, Path: path, Host: "app", Headers: headers,
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := check("PUT", "/orders/1", "6"); resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Errorf("gRPC PUT token 6: %v, want OK", resp)
	}
	resp := check("PUT", "/orders/1", "5")
	denied := resp.GetDeniedResponse()
	if resp.GetStatus().GetCode() == int32(codes.OK) || denied.GetStatus().GetCode() != typev3.StatusCode_Conflict ||
		!strings.Contains(denied.GetBody(), "urn:fenceproxy:stale-token") {
		t.Errorf("gRPC PUT token 5 after 6: %v, want denied 409 stale-token", resp)
	}
	if n := r.metric(t, `fenceproxy_requests_total{decision="stale",route="orders"}`); n != 2 {
		t.Errorf("stale counted %v over HTTP and gRPC, want 2", n)
	}
}
