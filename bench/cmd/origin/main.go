// Command origin is the service behind every proxy in the benchmark: it reads
// and discards the request body and answers 200 with a fixed 20-byte body.
// Only the standard library, so its cost per request is that of net/http.
//
//	origin -listen 127.0.0.1:28100
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

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
