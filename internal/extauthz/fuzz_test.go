package extauthz

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
)

// FuzzCheckRequest: no method, path or header panics Check or makes it fail;
// every answer is OK or a denial with a status Envoy accepts; a request the
// handler is asked about carries Envoy's method and target, also in
// X-Original-Method and X-Original-URI, and never the client's X-Forwarded-*
// ones; a request the adapter refuses itself is a 400 problem that does not
// echo the path. The seeds under testdata/fuzz are named after the attack
// they encode.
func FuzzCheckRequest(f *testing.F) {
	f.Add("PUT", "/orders/1?x=1", "fencing-token", "5", false)
	var seen *http.Request
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		if r.Method == http.MethodGet {
			w.Header().Set(decisionHeader, "unfenced")
			return
		}
		w.Header().Set(decisionHeader, "stale")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"type":"urn:fenceproxy:stale-token","status":409}`))
	})
	s := New(h, nil)
	f.Fuzz(func(t *testing.T, method, path, name, value string, headerMap bool) {
		hr := &authv3.AttributeContext_HttpRequest{Method: method, Path: path, Host: "orders.example", Protocol: "HTTP/1.1"}
		if headerMap {
			hr.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: name, RawValue: []byte(value)}, {Key: "fencing-token", Value: "5"},
			}}
		} else {
			hr.Headers = map[string]string{"fencing-token": "5"}
			if !strings.EqualFold(name, "fencing-token") {
				hr.Headers[name] = value
			}
		}
		seen = nil
		resp, err := s.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: hr},
		}})
		if err != nil || resp == nil {
			t.Fatalf("Check: %v, %v", resp, err)
		}
		code := codes.Code(resp.GetStatus().GetCode())
		switch {
		case code == codes.OK:
			if resp.GetOkResponse() == nil {
				t.Fatal("OK without an ok_response")
			}
		case code == codes.PermissionDenied || code == codes.Unavailable:
			st := resp.GetDeniedResponse().GetStatus().GetCode()
			if resp.GetDeniedResponse() == nil || st < 400 || st > 599 {
				t.Fatalf("denied with %v", resp.GetDeniedResponse())
			}
		default:
			t.Fatalf("gRPC code %v", code)
		}

		if seen == nil {
			d := resp.GetDeniedResponse()
			if d.GetStatus().GetCode() != 400 || code != codes.PermissionDenied {
				t.Fatalf("refused by the adapter with %v %v", code, d.GetStatus())
			}
			var p problem
			if err := json.Unmarshal([]byte(d.GetBody()), &p); err != nil || p.Type != typeBadRequest || p.Status != 400 {
				t.Fatalf("refusal body %q: %v", d.GetBody(), err)
			}
			if strings.Contains(path, "/") && strings.Contains(d.GetBody(), path) {
				t.Fatalf("refusal echoes the path: %q", d.GetBody())
			}
			return
		}
		if seen.Method != method || seen.RequestURI != path {
			t.Fatalf("handler saw %q %q, Envoy sent %q %q", seen.Method, seen.RequestURI, method, path)
		}
		if seen.URL.Path == "" || seen.URL.Path[0] != '/' {
			t.Fatalf("URL.Path %q", seen.URL.Path)
		}
		for k, want := range map[string][]string{
			hdrOriginalMethod: {method}, hdrOriginalURI: {path}, hdrForwardedMethod: nil, hdrForwardedURI: nil, "Host": nil,
		} {
			if got := seen.Header[k]; !reflect.DeepEqual(got, want) {
				t.Fatalf("header %s = %q, want %q", k, got, want)
			}
		}
		if got := seen.Header.Values("Fencing-Token"); !slices.Contains(got, "5") {
			t.Fatalf("token header lost: %q", got)
		}
	})
}
