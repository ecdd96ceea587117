package upstream

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// exchange sends one request to the upstream and returns the status and
// body the client got.
type exchange func(t *testing.T, method, path string) (int, string)

// viaTransport sends requests through tr straight to url.
func viaTransport(tr *Transport, url string) exchange {
	return func(t *testing.T, method, path string) (int, string) {
		t.Helper()
		var body io.Reader
		if method != http.MethodHead {
			body = strings.NewReader("payload")
		}
		req, _ := http.NewRequest(method, url+path, body)
		if !inline(req) {
			t.Fatalf("%s %s would not take the inline path", method, path)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
}

// viaReverseProxy sends requests through an httputil.ReverseProxy over a
// new Transport in front of url, and returns the transport.
func viaReverseProxy(t *testing.T, url string) (exchange, *Transport) {
	front, tr := frontOf(t, url)
	return func(t *testing.T, method, path string) (int, string) {
		t.Helper()
		var body io.Reader
		if method != http.MethodHead {
			body = strings.NewReader("payload")
		}
		req, _ := http.NewRequest(method, front.URL+path, body)
		resp, b := wiretest.Send(t, front.Client(), req)
		return resp.StatusCode, b
	}, tr
}

// A connection goes back to the pool only if the upstream sent exactly the
// response it framed. Bytes past its end, already read into the
// connection's buffer or arriving while it is idle, would otherwise be read
// as the next request's response: request 2 would get an answer forged by
// request 1's body, or an error after the upstream had run it. Here request
// 2 must get the upstream's own answer, sent on a new connection.
func TestUnsolicitedBytes(t *testing.T) {
	forged := rawOK("forged")
	tests := []struct {
		name   string
		method string // of request 1
		answer string // to request 1, with whatever follows it
		late   string // sent on the idle connection once request 1 is done
		code1  int
		body1  string
		reused bool // request 2 may go out on request 1's connection
	}{
		{"clean response: reused", "PUT", rawOK("one"), "", 200, "one", true},
		{"bytes after a Content-Length body", "PUT", rawOK("one") + forged, "", 200, "one", false},
		{"a body after HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "", 200, "", false},
		{"a response as the body of HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(forged)) + "\r\n\r\n" + forged, "", 200, "", false},
		{"a body after 204", "PUT", "HTTP/1.1 204 No Content\r\n\r\n" + forged, "", 204, "", false},
		{"a body after 304", "PUT", "HTTP/1.1 304 Not Modified\r\n\r\n" + forged, "", 304, "", false},
		{"bytes after Content-Length: 0", "PUT", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" + forged, "", 200, "", false},
		{"bytes after 1xx and the final response", "PUT",
			"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + rawOK("one") + forged, "", 200, "one", false},
		{"bytes after the terminating chunk", "PUT",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n0\r\n\r\n" + forged, "", 200, "one", false},
		{"bytes after the trailer section", "PUT",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\none\r\n0\r\nX-Sum: 1\r\n\r\n" + forged, "", 200, "one", false},
		{"bytes sent to the idle connection", "PUT", rawOK("one"), forged, 200, "one", false},
	}
	for _, tc := range tests {
		for _, via := range []string{"transport", "reverseproxy"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				if tc.late != "" && !canPeek {
					t.Skip("no MSG_PEEK here: every request takes http.Transport")
				}
				up := newRawUpstream(t, func(_ *rawUpstream, n int, req *http.Request) string {
					if n == 1 {
						return tc.answer
					}
					return realAnswer(req)
				})
				var do exchange
				var tr *Transport
				if via == "transport" {
					tr = New(Options{})
					t.Cleanup(tr.CloseIdleConnections)
					do = viaTransport(tr, up.URL())
				} else {
					do, tr = viaReverseProxy(t, up.URL())
				}

				if code, body := do(t, tc.method, "/one"); code != tc.code1 || body != tc.body1 {
					t.Fatalf("request 1: %d %q, want %d %q", code, body, tc.code1, tc.body1)
				}
				if tc.late != "" {
					if err := up.write(1, tc.late); err != nil {
						t.Fatal(err)
					}
					waitIdleHolds(t, tr)
				}
				if code, body := do(t, "PUT", "/two"); code != 200 || body != "answer to PUT /two" {
					t.Fatalf("request 2: %d %q, want the upstream's answer to it, 200 %q", code, body, "answer to PUT /two")
				}

				seen := up.requests()
				if len(seen) != 2 || seen[1].Method != "PUT" || seen[1].Path != "/two" {
					t.Fatalf("the upstream saw %+v, want request 1 then PUT /two", seen)
				}
				if reused := seen[1].Conn == seen[0].Conn; reused != tc.reused {
					t.Fatalf("request 2 on connection %d after request 1 on %d: reused = %v, want %v",
						seen[1].Conn, seen[0].Conn, reused, tc.reused)
				}
			})
		}
	}
}

// waitIdleHolds waits until an idle connection of tr is no longer fit for
// reuse (it has unread bytes in its socket, or its peer closed it), so that
// the next request finds it so.
func waitIdleHolds(t *testing.T, tr *Transport) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tr.mu.Lock()
		holds := false
		for _, conns := range tr.idle {
			for _, c := range conns {
				holds = holds || !c.alive()
			}
		}
		tr.mu.Unlock()
		if holds {
			return
		}
	}
	t.Fatal("the bytes sent to the idle connection never arrived")
}
