// Package proxy is fenceproxy's data path and admin endpoints.
//
// A request flows one way: its path is canonicalised (CanonicalPath), matched
// against the route table (chi), the token header is parsed (ParseToken) and,
// on a route with a sequence, the sequence header by the same rules
// (ParseSequence), the route's resource template is filled, the store admits
// or refuses the token, or the (token, sequence) pair (fencestore.Store.Admit,
// bounded by the store timeout), and only an admitted or unfenced request
// reaches httputil.ReverseProxy. Every refusal is an RFC 9457 problem written
// by writeProblem; the upstream receives nothing for it.
//
// What the package guarantees: a request on a fenced route is forwarded only
// after the store answered "admitted" for its token within the timeout; a
// store error, a timeout, a malformed or ambiguous request is refused (fail
// closed). The upstream receives the canonical path that was fenced and the
// token and sequence headers exactly as admitted.
//
// What it cannot guarantee: anything about requests that reach the upstream
// by another path, requests already forwarded before a newer token was
// admitted (they are in flight, not stale, when admitted), or the order of
// requests that share one token under ">=" on a route without a sequence.
package proxy
