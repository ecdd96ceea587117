package upstream

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// writeCase builds one request twice over (a request's body is read once):
// its fields as FuzzWriteRequest draws them.
type writeCase struct {
	method, host, target string
	name, value          string // one more header field ("" name: none)
	uaSet                bool   // a User-Agent field, with ua as its value
	ua                   string
	body, declared       int // body bytes, and the ContentLength it declares
	close                bool
}

func (c writeCase) request() (*http.Request, bool) {
	var body io.Reader
	if c.body > 0 {
		body = strings.NewReader(strings.Repeat("b", c.body))
	}
	req, err := http.NewRequest(c.method, "http://"+c.host+c.target, body)
	if err != nil {
		return nil, false
	}
	if c.name != "" {
		if !httpguts.ValidHeaderFieldName(c.name) {
			return nil, false // the inline path takes no such request (inline)
		}
		req.Header[c.name] = []string{c.value, c.value + " 2"}
	}
	if c.uaSet {
		req.Header["User-Agent"] = []string{c.ua}
	}
	req.Header["X-Forwarded-For"] = []string{"127.0.0.1"}
	req.Header["Accept"] = []string{"*/*"}
	req.ContentLength = int64(c.declared)
	req.Close = c.close
	return req, true
}

// written is what w writes of c: the bytes, and the error's text.
func (c writeCase) written(t testing.TB, w func(*bufio.Writer, *http.Request) error) (string, string) {
	req, ok := c.request()
	if !ok {
		t.Skip("not a request the inline path sends")
	}
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	err := w(bw, req)
	_ = bw.Flush()
	if err != nil {
		return out.String(), err.Error()
	}
	return out.String(), ""
}

func byNetHTTP(bw *bufio.Writer, req *http.Request) error { return req.Write(noHeaderFlush{bw}) }

// checkWritten fails unless writeRequest writes c as (*http.Request).Write
// does, and (when plain) says whether writeRequest wrote it itself.
func checkWritten(t testing.TB, c writeCase) (plain bool) {
	got, gotErr := c.written(t, writeRequest)
	want, wantErr := c.written(t, byNetHTTP)
	if got != want || gotErr != wantErr {
		t.Fatalf("writeRequest wrote\n%q (error %q)\n(*http.Request).Write\n%q (error %q)", got, gotErr, want, wantErr)
	}
	req, _ := c.request()
	_, plain = plainRequest(req)
	return plain && !containsCTL(req.URL.RequestURI())
}

func TestWriteRequestBytes(t *testing.T) {
	tests := []struct {
		name  string
		c     writeCase
		plain bool // written by writeRequest itself
	}{
		{"PUT with a body", writeCase{method: "PUT", host: "svc.local:8080", target: "/o/1?x=%41", name: "X-Token", value: "41", body: 20, declared: 20}, true},
		{"GET, no body", writeCase{method: "GET", host: "svc.local", target: "/", name: "X-A", value: "a"}, true},
		{"empty method: GET", writeCase{method: "", host: "svc.local", target: "/"}, true},
		{"POST without a body: Content-Length 0", writeCase{method: "POST", host: "h", target: "/p"}, true},
		{"DELETE without a body: no Content-Length", writeCase{method: "DELETE", host: "h", target: "/p"}, true},
		{"values trimmed", writeCase{method: "PUT", host: "h", target: "/", name: "X-A", value: " \tpadded\t ", body: 1, declared: 1}, true},
		{"line breaks in a value", writeCase{method: "PUT", host: "h", target: "/", name: "X-A", value: "a\r\nb\nc\rd", body: 1, declared: 1}, true},
		{"User-Agent empty: none sent", writeCase{method: "GET", host: "h", target: "/", uaSet: true}, true},
		{"User-Agent blank: sent empty", writeCase{method: "GET", host: "h", target: "/", uaSet: true, ua: "  "}, true},
		{"User-Agent kept", writeCase{method: "GET", host: "h", target: "/", uaSet: true, ua: " curl/8 "}, true},
		{"body longer than declared", writeCase{method: "PUT", host: "h", target: "/", body: 5, declared: 3}, true},
		{"body shorter than declared", writeCase{method: "PUT", host: "h", target: "/", body: 3, declared: 5}, true},
		{"escaped path", writeCase{method: "GET", host: "h", target: "/a%2Fb/c%20d"}, true},
		{"IPv6 host", writeCase{method: "GET", host: "[::1]:8080", target: "/"}, true},
		// What net/http writes differently from the rest: left to it.
		{"IPv6 zone", writeCase{method: "GET", host: "[fe80::1%25eth0]:8080", target: "/"}, false},
		{"Connection: close", writeCase{method: "GET", host: "h", target: "/", close: true}, false},
		{"body of unknown length", writeCase{method: "PUT", host: "h", target: "/", body: 3, declared: 0}, false},
		{"declared length, no body", writeCase{method: "PUT", host: "h", target: "/", declared: 3}, false},
		{"non-ASCII host", writeCase{method: "GET", host: "bücher.example", target: "/"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if plain := checkWritten(t, tc.c); plain != tc.plain {
				t.Fatalf("written by writeRequest itself: %v, want %v", plain, tc.plain)
			}
		})
	}
}

// FuzzWriteRequest holds writeRequest to (*http.Request).Write's bytes
// and errors for any request the inline path can send.
//
//	go test -run '^$' -fuzz FuzzWriteRequest -fuzztime 20s ./internal/upstream
func FuzzWriteRequest(f *testing.F) {
	f.Add("PUT", "svc.local:8080", "/o/1?x=%41", "X-Token", "41", false, "", 20, 20, false)
	f.Add("GET", "h", "/", "X-A", " a\r\nb ", true, " ua ", 0, 0, false)
	f.Add("POST", "[::1]:1", "/a%2Fb", "Host", "other", true, "", 3, 5, true)
	f.Add("PATCH", "h", "/?q", "Content-Length", "9", false, "", 5, 3, false)
	f.Fuzz(func(t *testing.T, method, host, target, name, value string, uaSet bool, ua string, body, declared int, close bool) {
		if body < 0 || body > 1<<10 || declared < 0 || declared > 1<<10 {
			t.Skip()
		}
		checkWritten(t, writeCase{method, host, target, name, value, uaSet, ua, body, declared, close})
	})
}
