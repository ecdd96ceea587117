package extauthz

import (
	"net/http"
	"strings"
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestRecorder: the in-memory writer answers as net/http would.
func TestRecorder(t *testing.T) {
	tests := []struct {
		name       string
		handler    func(w http.ResponseWriter)
		status     int
		header     string // the X value sent
		body       string
		truncated  bool
		bodyLength int // when body is not given
	}{
		{name: "nothing written", handler: func(w http.ResponseWriter) { w.Header().Set("X", "1") }, status: 200, header: "1"},
		{name: "Write implies 200", handler: func(w http.ResponseWriter) { _, _ = w.Write([]byte("ok")) }, status: 200, body: "ok"},
		{name: "first final status wins", handler: func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("X", "2")
			w.WriteHeader(http.StatusConflict)
			w.WriteHeader(http.StatusOK)
			w.Header().Set("X", "3")
			_, _ = w.Write([]byte("a"))
			_, _ = w.Write([]byte("b"))
		}, status: 409, header: "2", body: "ab"},
		{name: "header map kept by the handler", handler: func(w http.ResponseWriter) {
			h := w.Header()
			h.Set("X", "1")
			w.WriteHeader(http.StatusConflict)
			h.Set("X", "late")
		}, status: 409, header: "1"},
		{name: "body capped", handler: func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(strings.Repeat("a", maxBody-1)))
			if n, err := w.Write([]byte("bcd")); n != 3 || err != nil {
				panic("a capped Write must still report success")
			}
			_, _ = w.Write([]byte("e"))
		}, status: 200, bodyLength: maxBody, truncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &recorder{}
			tt.handler(w)
			status, h := w.result()
			if status != tt.status || h.Get("X") != tt.header || w.truncated != tt.truncated {
				t.Errorf("got %d X=%q truncated=%v, want %d X=%q truncated=%v", status, h.Get("X"), w.truncated, tt.status, tt.header, tt.truncated)
			}
			if tt.bodyLength > 0 {
				if len(w.body) != tt.bodyLength || !strings.HasSuffix(string(w.body), "ab") {
					t.Errorf("body of %d bytes ending %q", len(w.body), w.body[len(w.body)-2:])
				}
			} else if string(w.body) != tt.body {
				t.Errorf("body %q, want %q", w.body, tt.body)
			}
		})
	}
}

// TestHTTPStatus: a denial's status is one Envoy's enum accepts.
func TestHTTPStatus(t *testing.T) {
	for code, want := range map[int]typev3.StatusCode{
		400: 400, 401: 401, 403: 403, 409: 409, 428: 428, 503: 503, 500: 500,
		302: 302, 499: 403, 420: 403, 599: 500, 0: 500, 100: 500, 999: 500, -1: 500,
	} {
		if got := httpStatus(code); got != want {
			t.Errorf("httpStatus(%d) = %v, want %v", code, got, want)
		}
	}
}
