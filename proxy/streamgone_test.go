package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// A limit, not a guarantee (docs/guarantees.md): a streamed body (not read
// before admission) whose client leaves while the request waits at the
// barrier is not noticed there. net/http ends a request's context only
// once its body has been read to the end, and the bytes still in the
// socket hide the client's close; so once the older request is done, the
// newer one is forwarded, and its body ends where the client's stopped:
// the upstream reads fewer bytes than the Content-Length announced, and an
// unexpected EOF. An upstream that acts only on a complete body applies
// nothing; one that acts on the body as it streams in applies a part.
func TestStreamedBodyClientGoneAtTheBarrier(t *testing.T) {
	const size, part = 4 * maxBodyFirst, maxBodyFirst / 2
	tests := []struct {
		name, framing, body string
	}{
		{"content-length", fmt.Sprintf("Content-Length: %d", size), strings.Repeat("b", part)},
		{"chunked", "Transfer-Encoding: chunked", fmt.Sprintf("%x\r\n%s\r\n", part, strings.Repeat("b", part))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, drainRoutes, memstore.New())
			h := holdingUpstream(f)
			type got struct {
				n   int64
				err error
			}
			body := make(chan got, 1)
			f.up.handle(func(w http.ResponseWriter, r *http.Request) {
				tok := r.Header.Get("Fencing-Token")
				h.arrivals <- tok
				if r.Header.Get("X-Hold") != "" {
					<-h.release
				}
				n, err := io.Copy(io.Discard, r.Body)
				if tok == "42" {
					body <- got{n, err}
				}
				_, _ = io.WriteString(w, "stored "+tok)
			})
			held := f.send("/docs/1", "41", true)
			h.arrives(t, "41", 5*time.Second)

			c, err := net.Dial("tcp", f.front.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "PUT /docs/1 HTTP/1.1\r\nHost: x\r\nFencing-Token: 42\r\n%s\r\n\r\n%s", tc.framing, tc.body)
			h.nothingArrives(t, 300*time.Millisecond, "42 while 41 is in flight")
			_ = c.Close() // 42's client leaves while 42 waits
			close(h.release)
			answer(t, held, http.StatusOK)

			h.arrives(t, "42", 5*time.Second)
			select {
			case g := <-body:
				if g.n != part || !errors.Is(g.err, io.ErrUnexpectedEOF) {
					t.Fatalf("42's body at the upstream: %d bytes, %v; want the %d sent, then cut", g.n, g.err, part)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("42's body never ended at the upstream")
			}
		})
	}
}
