package client_test

import (
	"context"
	"math"
	"testing"

	"github.com/fenceproxy/fenceproxy/client"
)

func TestTokenContext(t *testing.T) {
	tests := []struct {
		name   string
		ctx    context.Context
		want   uint64
		wantOK bool
	}{
		{"none", context.Background(), 0, false},
		{"zero is a token", client.WithToken(context.Background(), 0), 0, true},
		{"typical", client.WithToken(context.Background(), 42), 42, true},
		{"max", client.WithToken(context.Background(), math.MaxUint64), math.MaxUint64, true},
		{"innermost wins", client.WithToken(client.WithToken(context.Background(), 1), 2), 2, true},
		{"a signed token is not a plain one", client.WithSignedToken(context.Background(), "a.b.c"), 0, false},
		{"a plain token over a signed one", client.WithToken(client.WithSignedToken(context.Background(), "a.b.c"), 5), 5, true},
		{"survives derived contexts", func() context.Context {
			ctx, cancel := context.WithCancel(client.WithToken(context.Background(), 7))
			cancel()
			return ctx
		}(), 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := client.TokenFromContext(tt.ctx)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("TokenFromContext = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestSignedTokenContext(t *testing.T) {
	tests := []struct {
		name   string
		ctx    context.Context
		want   string
		wantOK bool
	}{
		{"none", context.Background(), "", false},
		{"typical", client.WithSignedToken(context.Background(), "h.p.s"), "h.p.s", true},
		{"empty is one (Transport refuses it)", client.WithSignedToken(context.Background(), ""), "", true},
		{"innermost wins over a plain token", client.WithSignedToken(client.WithToken(context.Background(), 1), "h.p.s"), "h.p.s", true},
		{"a plain token wins over it", client.WithToken(client.WithSignedToken(context.Background(), "h.p.s"), 1), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := client.SignedTokenFromContext(tt.ctx)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("SignedTokenFromContext = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
