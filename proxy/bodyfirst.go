package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// maxBodyFirst bounds the bodies read whole before admission: the inline
// forwarding's limit, so that a body read first is also written in one go.
const maxBodyFirst = upstream.MaxInlineBody

// errBodyIncomplete and errBodyTimeout say why a body read before admission
// failed; the request is refused and the mark is not touched.
var (
	errBodyIncomplete = errors.New("the request body ended before its Content-Length")
	errBodyTimeout    = errors.New("the request body did not arrive within FENCE_BODY_TIMEOUT")
)

// readBodyFirst reads a fenced request's body completely before it is
// admitted, when the body is small and of known length, and puts it back as
// an in-memory body.
//
// Admission happens when the request's headers have arrived. Were its body
// then read at the client's pace, a holder that paused mid-body (exactly the
// holder fencing exists to stop) would be admitted with its old token, a
// newer holder would write meanwhile, and the old body would complete and be
// applied after the newer write. Read first, the old token is admitted only
// once its write is whole, and is refused if a newer one was admitted in the
// meantime. Larger and streamed bodies keep being streamed (they are bounded
// by FENCE_BODY_TIMEOUT only).
//
// The buffer is not pooled: ReverseProxy closes the body when the handler
// returns while http.Transport may still be reading it, so a buffer handed
// back on Close could be overwritten under a write to the upstream.
func readBodyFirst(r *http.Request) error {
	if !readsFirst(r) {
		return nil
	}
	buf := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		if isTimeout(err) {
			return errBodyTimeout
		}
		return errBodyIncomplete
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(buf))
	return nil
}

// readsFirst reports whether r's body is one readBodyFirst reads whole
// before admission: of a known length, from 1 byte to maxBodyFirst.
func readsFirst(r *http.Request) bool {
	return hasBody(r) && r.ContentLength > 0 && r.ContentLength <= maxBodyFirst
}

// hasBody reports whether r has a body to read at all.
func hasBody(r *http.Request) bool { return r.Body != nil && r.Body != http.NoBody }
