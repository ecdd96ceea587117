// Command echoupstream is a toy upstream for trying fenceproxy by hand: it
// keeps the last body written to each path, prints one line per request it
// receives (so you can see what got past the fence), and answers with what it
// holds.
//
//	go run ./cmd/echoupstream            # listens on 127.0.0.1:3000
//	ECHO_LISTEN_ADDR=127.0.0.1:4000 go run ./cmd/echoupstream
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"time"
)

func main() {
	addr := os.Getenv("ECHO_LISTEN_ADDR")
	if addr == "" {
		addr = "127.0.0.1:3000"
	}
	var mu sync.Mutex
	state := map[string]string{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		fmt.Printf("%s upstream received %s %s token=%q body=%q\n",
			time.Now().Format("15:04:05.000"), r.Method, r.URL.RequestURI(), r.Header.Get("Fencing-Token"), body)
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut, http.MethodPost, http.MethodPatch:
			state[r.URL.Path] = string(body)
		case http.MethodDelete:
			delete(state, r.URL.Path)
		}
		fmt.Fprintf(w, "%s holds %q\n", r.URL.Path, state[r.URL.Path])
	})
	log.Printf("echoupstream listening on %s", addr)
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
