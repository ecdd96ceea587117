package upstream

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// maxInlineAllocs is what one inline round trip of TestRoundTripAllocs
// allocates with Go 1.26, 2 of them the test's request body: as much as the
// transport allocated before it moved out of package proxy. Most of it is
// net/http's (Request.Write, ReadResponse).
const maxInlineAllocs = 20

// The inline path exists to cost less than http.Transport per request: one
// round trip of a small PUT allocates less through it (about half), and no
// more than maxInlineAllocs.
func TestRoundTripAllocs(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	var got [2]float64
	for i, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"upstream", New(Options{})},
		{"net/http", &http.Transport{DisableCompression: true}},
	} {
		url, wireLen := cannedServer(t, answer)
		req, _ := http.NewRequest("PUT", url+"/x", nil)
		buf := make([]byte, 64)
		allocs := testing.AllocsPerRun(200, func() {
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader("0123456789abcdefghi\n")), 20
			resp, err := tc.rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
			}
			resp.Body.Close()
		})
		tc.rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
		t.Logf("%s: %v allocations per round trip (request %d bytes)", tc.name, allocs, wireLen)
		got[i] = allocs
	}
	if got[0] >= got[1] {
		t.Errorf("the inline path allocates %v per round trip, http.Transport %v: it should cost less", got[0], got[1])
	}
	if !raceEnabled && got[0] > maxInlineAllocs {
		t.Errorf("the inline path allocates %v per round trip, want at most %d", got[0], maxInlineAllocs)
	}
}

// cannedServer answers every request with answer, allocating nothing: it
// reads exactly the bytes of the test's request (a PUT of 20 bytes to /x)
// and writes answer. It returns its URL and the request's length.
func cannedServer(t *testing.T, answer string) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	sample, _ := http.NewRequest("PUT", url+"/x", strings.NewReader("0123456789abcdefghi\n"))
	var wire strings.Builder
	if err := sample.Write(&wire); err != nil {
		t.Fatal(err)
	}
	n := wire.Len()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				buf, out := make([]byte, n), []byte(answer)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return url, n
}
