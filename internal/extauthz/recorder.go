package extauthz

import (
	"net/http"
)

// maxBody bounds the answer body kept from the handler. A problem answer is
// a few hundred bytes; anything past this is dropped (and logged), since a
// denied response travels in one gRPC message to Envoy.
const maxBody = 64 << 10

// recorder is the in-memory http.ResponseWriter the handler answers into.
// As net/http does, the first WriteHeader with a final status (>= 200) fixes
// the status and the headers (later changes to the map are not sent), a
// Write before it implies 200, and a handler that writes nothing answers
// 200.
type recorder struct {
	header    http.Header // the map the handler sees
	sent      http.Header // header as it was at WriteHeader
	status    int
	body      []byte
	truncated bool
}

func (w *recorder) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

func (w *recorder) WriteHeader(code int) {
	if w.status != 0 || code < 200 {
		return // a second call, or an informational answer: ignored
	}
	w.status = code
	w.sent = w.header.Clone() // later changes are not part of the answer
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if room := maxBody - len(w.body); len(p) > room {
		w.body = append(w.body, p[:max(room, 0)]...)
		w.truncated = true
		return len(p), nil
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// result returns the final status and headers, with net/http's defaults
// for a handler that wrote nothing.
func (w *recorder) result() (int, http.Header) {
	if w.status == 0 {
		return http.StatusOK, w.header
	}
	return w.status, w.sent
}
