package client

import "context"

// tokenKey is the context key of the fencing token. An unexported type, so
// that no other package can set or read the value except through WithToken and
// TokenFromContext.
type tokenKey struct{}

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
// was one. A token of 0 is a token (ok is true), distinct from none.
func TokenFromContext(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(tokenKey{}).(uint64)
	return t, ok
}
