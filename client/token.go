package client

import "context"

// tokenKey is the context key of the fencing token. An unexported type, so
// that no other package can set or read the value except through WithToken,
// WithSignedToken and their readers.
//
// A plain token (uint64) and a signed one (signedToken) share the key, so
// that the innermost of WithToken and WithSignedToken decides what a
// request carries, as with two WithTokens.
type tokenKey struct{}

// signedToken is a signed token as the context holds it; its own type tells
// it apart from a plain token under tokenKey.
type signedToken string

// WithToken returns a copy of ctx that carries token, the fencing token of the
// lease on whose behalf requests made with the returned context act.
// Transport sends it as the token header.
//
// Any uint64 is accepted, 0 included; the proxy compares tokens as unsigned
// 64-bit integers.
func WithToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFromContext returns the token WithToken put in ctx, and whether there
// was one. A token of 0 is a token (ok is true), distinct from none. A
// context whose innermost token is a signed one (WithSignedToken) has no
// plain token: ok is false.
func TokenFromContext(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(tokenKey{}).(uint64)
	return t, ok
}

// WithSignedToken returns a copy of ctx that carries token, a signed fencing
// token (a compact JWS, as redislease.Lease.SignedToken or `fenceproxy token
// sign` makes it), for a proxy that verifies signed tokens
// (FENCE_TOKEN_KEYS_FILE). Transport sends it as the token header exactly as
// given: it is signed, so a single changed byte would make it invalid.
//
// It replaces a token that WithToken put in ctx, and WithToken on the
// returned context replaces it: the innermost wins. Transport refuses to
// send a token that is empty or holds a character other than visible ASCII
// (a compact JWS is base64url and dots), since a header could not carry it
// unchanged.
func WithSignedToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, tokenKey{}, signedToken(token))
}

// SignedTokenFromContext returns the token WithSignedToken put in ctx, and
// whether there was one; ok is false when the innermost token is a plain
// one (WithToken).
func SignedTokenFromContext(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tokenKey{}).(signedToken)
	return string(t), ok
}
