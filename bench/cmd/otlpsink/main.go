// Command otlpsink is the trace collector of bench/tracing.sh: an OTLP/HTTP
// endpoint (POST /v1/traces, protobuf, uncompressed) that counts the spans
// it receives and keeps nothing, so a traced fenceproxy exports as it would
// to a real collector without one installed. GET /count answers
// "spans=N requests=N bytes=N" so far. Only the standard library: the spans
// are counted by walking the protobuf wire format (resource_spans 1 ->
// scope_spans 2 -> spans 2), not decoded.
//
//	otlpsink -listen 127.0.0.1:28114
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync/atomic"
	"time"
)

var spans, requests, bytes atomic.Int64

func main() {
	listen := flag.String("listen", "127.0.0.1:28114", "address to serve on (loopback)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n, err := countSpans(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		spans.Add(n)
		requests.Add(1)
		bytes.Add(int64(len(b)))
		// An empty ExportTraceServiceResponse: everything accepted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "spans=%d requests=%d bytes=%d\n", spans.Load(), requests.Load(), bytes.Load())
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// countSpans counts the spans of an ExportTraceServiceRequest.
func countSpans(b []byte) (int64, error) {
	var n int64
	err := fields(b, 1, func(rs []byte) error { // ResourceSpans
		return fields(rs, 2, func(ss []byte) error { // ScopeSpans
			return fields(ss, 2, func([]byte) error { n++; return nil }) // Span
		})
	})
	return n, err
}

var errWire = errors.New("not a protobuf message")

// fields calls f with each length-delimited field numbered num of message
// b, skipping every other field.
func fields(b []byte, num uint64, f func([]byte) error) error {
	for len(b) > 0 {
		key, k := binary.Uvarint(b)
		if k <= 0 {
			return errWire
		}
		b = b[k:]
		switch key & 7 {
		case 0: // varint
			_, k := binary.Uvarint(b)
			if k <= 0 {
				return errWire
			}
			b = b[k:]
		case 1: // fixed64
			if len(b) < 8 {
				return errWire
			}
			b = b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return errWire
			}
			b = b[4:]
		case 2: // length-delimited
			l, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < l {
				return errWire
			}
			v := b[k : k+int(l)]
			b = b[k+int(l):]
			if key>>3 == num {
				if err := f(v); err != nil {
					return err
				}
			}
		default:
			return errWire
		}
	}
	return nil
}
