// Package client is what a program that writes through fenceproxy uses: it
// carries the fencing token of the caller's lease in the request context, puts
// it on the wire as the token header, and turns fenceproxy's refusals back into
// Go errors.
//
//	ctx = client.WithToken(ctx, token) // the token the lease was granted with
//	hc := &http.Client{Transport: &client.Transport{}}
//	resp, err := hc.Do(req.WithContext(ctx))
//	if errors.Is(err, client.ErrStaleToken) {
//		// a newer lease holder has written: this process no longer owns the
//		// resource and must stop, not retry with the same token
//	}
//
// What it guarantees:
//
//   - A request sent through Transport carries exactly one token header, whose
//     value is the canonical decimal of the token in its context, or, for a
//     proxy that verifies signed tokens, the signed token of its context
//     (WithSignedToken) byte for byte; any value the caller set is replaced. A request whose context has no token is not sent
//     at all (ErrNoToken) unless Transport.Optional says so, so a forgotten
//     WithToken fails in the caller, not as a 428 from the proxy.
//   - On a route that fenceproxy orders by a sequence as well, a context with
//     a Sequence (WithSequence) numbers each request: Transport sends exactly
//     one sequence header, with a fresh number drawn from it for every
//     request it sends (retries and redirects included), greater than every
//     number drawn before; WithSequenceNumber sends one fixed number instead.
//     A sequence is never sent without a token: such a request is not sent
//     (ErrNoToken). Numbers drawn concurrently are distinct but may arrive
//     out of order, and those that arrive late are refused
//     (ErrStaleSequence).
//   - The caller's *http.Request is never modified.
//   - Only fenceproxy's own answers become errors: an application/problem+json
//     response whose type starts with "urn:fenceproxy:". The upstream
//     application's 409s, 503s and problem answers of its own pass through
//     untouched, so they are never mistaken for the proxy's.
//   - Tokens, sequences and marks are parsed exactly over the whole uint64
//     range (they are decimal strings on the wire; no floating point is
//     involved).
//
// The package imports nothing but the standard library, and nothing of the
// proxy, so depending on it does not pull the proxy into a program. A lease
// that mints tokens (and, given a private key, signed tokens) is in the
// sub-package redislease; tokens from other lease services, and signed
// tokens, are discussed in docs/tokens.md.
package client
