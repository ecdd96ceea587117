package config

import (
	"fmt"
	"slices"
	"strings"
)

// validHeaderName reports whether s is an HTTP field name: a non-empty RFC
// 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// reservedHeaders may not carry the token or the sequence: proxies remove,
// rewrite or interpret them (hop-by-hop and framing fields).
var reservedHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade",
	"TE", "Trailer", "Content-Length", "Host", "Proxy-Authorization", "Proxy-Authenticate",
}

// checkFenceHeader returns why name cannot carry the token or the sequence
// (FENCE_TOKEN_HEADER, FENCE_SEQUENCE_HEADER), or nil.
func checkFenceHeader(name string) error {
	if !validHeaderName(name) {
		return fmt.Errorf("%q is not a valid HTTP header name", name)
	}
	for _, h := range reservedHeaders {
		if strings.EqualFold(name, h) {
			return fmt.Errorf("%q is a hop-by-hop or framing header that proxies rewrite; choose another", name)
		}
	}
	return nil
}

// forwardingHeaders are set by the forwarding itself: the reverse proxy drops
// what the client sent and writes its own (X-Forwarded-For appends the
// client's address).
var forwardingHeaders = []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"}

// unseenHeader says why the upstream does not receive header name (canonical
// form) as the client sent it, or "" when it does. A resource template may
// not read such a header: the fence would name one resource and the upstream
// serve another. Host is kept: the proxy forwards the client's Host.
func unseenHeader(name string) string {
	if slices.Contains(forwardingHeaders, name) {
		return name + " is rewritten by the forwarding"
	}
	if name != "Host" && slices.ContainsFunc(reservedHeaders, func(h string) bool { return strings.EqualFold(h, name) }) {
		return name + " is a hop-by-hop or framing header that the forwarding removes or rewrites"
	}
	return ""
}
