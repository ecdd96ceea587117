// Command origin is the service behind every proxy in the benchmark: it reads
// and discards the request body and answers 200 with a fixed 20-byte body.
// Only the standard library, so its cost per request is that of net/http.
// A request with a "Bench-Hold: <duration>" header (bench/cmd/drainwake's
// older request) is answered that long after its body was read; a request
// with "Bench-Probe: 1" (drainwake's newer request) that arrives while a
// held request of the same path is still being held is answered with
// "Bench-Overlap: 1": a proxy let it through before the older one was done.
// The load sends neither header, and pays only the two header lookups.
//
//	origin -listen 127.0.0.1:28100
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"sync"
	"time"
)

// held is the paths of the requests being held (Bench-Hold) right now.
var held sync.Map

var reply = []byte("origin says ok 200.\n") // 20 bytes

func main() {
	listen := flag.String("listen", "127.0.0.1:28100", "address to serve on (loopback)")
	flag.Parse()
	if len(reply) != 20 {
		log.Fatalf("reply is %d bytes, want 20", len(reply))
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		if v := r.Header["Bench-Hold"]; len(v) > 0 {
			if d, err := time.ParseDuration(v[0]); err == nil && d > 0 && d <= 10*time.Second {
				// Out of held before the answer is written: a proxy cannot
				// have read the answer (flushed when the handler returns)
				// before that.
				held.Store(r.URL.Path, struct{}{})
				time.Sleep(d)
				held.Delete(r.URL.Path)
			}
		}
		if _, ok := r.Header["Bench-Probe"]; ok {
			if _, busy := held.Load(r.URL.Path); busy {
				h["Bench-Overlap"] = []string{"1"}
			}
		}
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		h["Content-Length"] = []string{"20"}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(reply)
	})
	srv := &http.Server{
		Addr:              *listen,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	log.Printf("origin on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
