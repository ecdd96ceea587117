package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// rawUpstream is an upstream that answers with bytes the test writes by
// hand, so that it can break HTTP framing as a faulty server would. It
// numbers its connections from 1 in the order it accepts them and records on
// which one each request arrived.
type rawUpstream struct {
	ln net.Listener
	// answer returns the bytes that answer request n (numbered from 1 across
	// connections); "" closes the connection without answering.
	answer func(u *rawUpstream, n int, req *http.Request) string

	mu     sync.Mutex
	conns  []net.Conn
	seen   []rawRequest
	closed bool
	wg     sync.WaitGroup
}

// rawRequest is one request as the raw upstream read it.
type rawRequest struct {
	Method, Path string
	Conn         int // the connection it arrived on, numbered from 1
}

func newRawUpstream(t *testing.T, answer func(u *rawUpstream, n int, req *http.Request) string) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, answer: answer}
	u.wg.Add(1)
	go u.accept()
	t.Cleanup(u.close)
	return u
}

func (u *rawUpstream) URL() string { return "http://" + u.ln.Addr().String() }

func (u *rawUpstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		if u.closed {
			u.mu.Unlock()
			_ = c.Close()
			return
		}
		u.conns = append(u.conns, c)
		id := len(u.conns)
		u.wg.Add(1)
		u.mu.Unlock()
		go u.serve(c, id)
	}
}

func (u *rawUpstream) serve(c net.Conn, id int) {
	defer u.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		u.mu.Lock()
		u.seen = append(u.seen, rawRequest{Method: req.Method, Path: req.URL.Path, Conn: id})
		n := len(u.seen)
		u.mu.Unlock()
		raw := u.answer(u, n, req)
		if raw == "" {
			return
		}
		if _, err := io.WriteString(c, raw); err != nil {
			return
		}
	}
}

// write sends raw on connection id (numbered from 1), unasked.
func (u *rawUpstream) write(id int, raw string) error {
	u.mu.Lock()
	c := u.conns[id-1]
	u.mu.Unlock()
	_, err := io.WriteString(c, raw)
	return err
}

// requests returns what arrived so far, in order.
func (u *rawUpstream) requests() []rawRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]rawRequest(nil), u.seen...)
}

// close stops listening, closes every connection and waits for the
// goroutines. Closing the listener alone makes new dials fail.
func (u *rawUpstream) close() {
	_ = u.ln.Close()
	u.mu.Lock()
	u.closed = true
	for _, c := range u.conns {
		_ = c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// rawOK is a complete 200 response with body, framed by Content-Length.
func rawOK(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// realAnswer is the raw upstream's own answer to req: a client that gets it
// got the response to the request it sent.
func realAnswer(req *http.Request) string {
	return rawOK("answer to " + req.Method + " " + req.URL.Path)
}
