// Command goplain is the baseline every ratio is taken against: the plainest
// sensible Go reverse proxy (net/http/httputil.ReverseProxy with a Transport
// that keeps enough idle upstream connections), doing no fencing at all. A
// fencing proxy built on net/http does this forwarding plus an admission, so
// goplain's throughput is what "fencing costs nothing" is measured against.
//
//	goplain -listen 127.0.0.1:28101 -upstream http://127.0.0.1:28100
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:28101", "address to serve on (loopback)")
	upstream := flag.String("upstream", "http://127.0.0.1:28100", "origin base URL")
	flag.Parse()
	target, err := url.Parse(*upstream)
	if err != nil || target.Host == "" {
		log.Fatalf("-upstream %q: not an absolute URL (%v)", *upstream, err)
	}
	transport := &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// The default of 2 idle connections per host would make most of a
		// 32-connection load open and close upstream TCP connections.
		MaxIdleConns:          2048,
		MaxIdleConnsPerHost:   2048,
		IdleConnTimeout:       2 * time.Minute,
		DisableCompression:    true,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: transport,
	}
	srv := &http.Server{
		Addr:              *listen,
		Handler:           proxy,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	log.Printf("goplain on %s -> %s", *listen, target)
	log.Fatal(srv.ListenAndServe())
}
