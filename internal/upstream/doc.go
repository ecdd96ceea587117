// Package upstream is the http.RoundTripper fenceproxy plugs into
// httputil.ReverseProxy's Transport for the hop to the upstream. It knows
// nothing of fencing: it moves requests and responses, as http.Transport
// does, for one kind of hop, a sidecar's to one upstream over loopback.
//
// It exists for speed. http.Transport hands every request to a writeLoop
// goroutine and every response back from a readLoop goroutine, and flushes
// a PUT's headers before its body; on a loopback hop those two handoffs and
// the extra write were most of the proxy's CPU per request
// (docs/performance.md). Here the common request (plain http, a body of
// known length up to MaxInlineBody, no Expect, no Upgrade, no trailers, a
// valid method and header) is written in one write on the caller's
// goroutine, and its response read there too. Everything else goes to an
// *http.Transport, unchanged: upgrades, 100-continue, streamed and large
// uploads, https, the deprecated Request.Cancel, and requests http.Transport
// refuses (which it then refuses with its own error, before dialling).
//
// The wire format is net/http's own: responses are parsed with
// http.ReadResponse, and requests are written as (*http.Request).Write
// writes them (the common request by write.go, byte for byte the same, as
// FuzzWriteRequest checks; any other by (*http.Request).Write itself); only
// the connection handling is this package's. Against http.Transport, the
// conformance test (conformance_test.go) runs the same scripted exchanges
// through both and holds them to the same bytes on the wire, the same
// responses, the same error kinds and the same connection reuse:
//
//   - A connection is reused only when the upstream sent exactly the response
//     it framed. Bytes past its end (after a Content-Length body, the last
//     chunk or the trailers, a body after a HEAD, 204 or 304, bytes sent to
//     an idle connection) close it, so one request's response can never be
//     read as another's. An idle connection is looked at (one non-blocking
//     MSG_PEEK) before it is reused, so an upstream's keep-alive close does
//     not fail the next request. Where the look is not possible (not Unix),
//     every request goes to http.Transport.
//   - A request is sent again only when a reused connection failed under it,
//     and then only under http.Transport's rule (nothing of it written and
//     no body, or no body and an idempotent method or an Idempotency-Key).
//   - Cancellation (the request's context) unblocks the exchange and is the
//     error returned, also from a response body read it cut short.
//   - req.Body is closed on every path, errors included.
//
// It differs from http.Transport where it says more, or less:
//
//   - NotSentError marks the failures before any byte of the request left
//     (a failed dial, on either path), so a caller can tell a client that
//     sending again cannot apply the request twice.
//   - Nothing is sent once the request's context deadline has passed by the
//     clock, even when the context's timer has not fired (a process frozen
//     and resumed): RoundTrip fails with Options.PastDeadline, and on the
//     inline path so does any later write.
//   - At most 16 informational (1xx) responses are taken before the final
//     one; http.Transport bounds them only by size.
//   - A 101 Switching Protocols to a request that did not ask for an upgrade
//     is an error; http.Transport returns it, and leaves refusing it to its
//     caller (ReverseProxy does).
//   - HTTP/1.1 only on the inline path; error texts are its own.
package upstream
