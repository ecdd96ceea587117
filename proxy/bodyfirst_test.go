package proxy

import (
	"github.com/fenceproxy/fenceproxy/internal/wiretest"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawPut opens a connection to the proxy and sends the head of a PUT with a
// body of size bytes, then the first part of the body.
func rawPut(t *testing.T, addr, path, token string, size int, first string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := "PUT " + path + " HTTP/1.1\r\nHost: a\r\nFencing-Token: " + token +
		"\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head+first); err != nil {
		t.Fatal(err)
	}
	return conn
}

// The stalled-body story. Holder 5 sends half of its 20 KB write and pauses;
// holder 6 writes meanwhile; then 5's body completes. Before bodies were read
// ahead of admission, 5 was admitted when its headers arrived and the
// upstream stored 5's data after 6's. Now 5 is admitted only once its body is
// whole, by then 6 holds the mark, and 5 is refused: the upstream stores 6.
func TestStalledBodyStoryEndsWithTheNewerWrite(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	const size = 20 << 10
	old := strings.Repeat("5", size)
	conn := rawPut(t, f.front.Listener.Addr().String(), "/orders/1", "5", size, old[:size/2])
	time.Sleep(100 * time.Millisecond) // 5's headers and half its body are in

	newer := strings.Repeat("6", size)
	if resp, body := f.doBody("PUT", "/orders/1", newer, "Fencing-Token", "6"); resp.StatusCode != 200 {
		t.Fatalf("holder 6: %d %s", resp.StatusCode, body)
	}
	if _, err := io.WriteString(conn, old[size/2:]); err != nil {
		t.Fatal(err)
	}
	resp, err := wiretest.Answer(conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	p := decodeProblem(t, resp, string(body))
	if resp.StatusCode != 409 || p.Type != TypeStaleToken || p.HighWaterMark != "6" {
		t.Fatalf("holder 5 after its pause: %d %+v", resp.StatusCode, p)
	}
	got := f.up.received()
	if len(got) != 1 || got[0].Body != newer {
		t.Fatalf("the upstream received %d writes; want only holder 6's", len(got))
	}
}

// A body that ends early or stalls past FENCE_BODY_TIMEOUT is refused before
// admission: nothing reaches the upstream and the mark is not touched.
func TestIncompleteBodyIsNotAdmitted(t *testing.T) {
	t.Run("ends early", func(t *testing.T) {
		f := newFixture(t, ordersRoutes, nil)
		conn := rawPut(t, f.front.Listener.Addr().String(), "/orders/2", "5", 100, "only half")
		_ = conn.(*net.TCPConn).CloseWrite()
		resp, err := wiretest.Answer(conn, 0)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		p := decodeProblem(t, resp, string(body))
		if resp.StatusCode != 400 || p.Type != TypeBadRequest {
			t.Fatalf("%d %+v", resp.StatusCode, p)
		}
		if _, ok, _ := f.store.Mark(t.Context(), "orders/2"); ok || len(f.up.received()) != 0 {
			t.Fatal("an incomplete body was admitted or forwarded")
		}
	})
	t.Run("stalls", func(t *testing.T) {
		front := bodyTimeoutProxy(t, 200*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
			t.Error("the upstream was called")
		})
		conn := rawPut(t, front.Listener.Addr().String(), "/x", "5", 100, "part")
		resp, err := wiretest.Answer(conn, 0)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		p := decodeProblem(t, resp, string(body))
		if resp.StatusCode != http.StatusRequestTimeout || p.Type != TypeBadRequest {
			t.Fatalf("%d %+v", resp.StatusCode, p)
		}
	})
}

// doBody sends method target with body and the given header pairs.
func (f *fixture) doBody(method, target, body string, headers ...string) (*http.Response, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.front.URL+target, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := f.front.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
