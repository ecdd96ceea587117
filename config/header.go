package config

import (
	"fmt"
	"net/textproto"
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
	for _, h := range strippedHeaders {
		if strings.EqualFold(name, h) {
			return fmt.Errorf("%q is removed from every request (a client must not send it); choose another", name)
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
	if slices.Contains(strippedHeaders, name) {
		return name + " is removed from every request before the upstream (a client must not set it)"
	}
	if name != "Host" && slices.ContainsFunc(reservedHeaders, func(h string) bool { return strings.EqualFold(h, name) }) {
		return name + " is a hop-by-hop or framing header that the forwarding removes or rewrites"
	}
	return ""
}

// strippedHeaders are removed from every request before the upstream (the
// proxy's edges.go says why): fenceproxy's own answer headers, and the
// headers IIS, Symfony and Zend read as the path. A resource template may
// not read them.
var strippedHeaders = []string{"Fence-Decision", "Fence-Problem", "X-Original-Url", "X-Rewrite-Url"}

// builtinOverrideHeaders are the method override headers the proxy always
// reads.
var builtinOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// parseOverrideHeaders reads FENCE_METHOD_OVERRIDE_HEADERS, a comma list of
// header names, into their canonical forms: each a valid name, none a
// hop-by-hop or framing header (it would not reach the app, which would
// then act on the request's own method), none the token or the sequence
// header, none listed twice.
func parseOverrideHeaders(v, tokenHeader, sequenceHeader string, bad func(variable, format string, args ...any)) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var out []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		canon := textproto.CanonicalMIMEHeaderKey(h)
		// An override header is read as the fence headers are, so it is
		// held to the same rules.
		err := checkFenceHeader(h)
		switch {
		case err != nil:
			bad("FENCE_METHOD_OVERRIDE_HEADERS", "%v", err)
		case strings.EqualFold(h, tokenHeader) || strings.EqualFold(h, sequenceHeader):
			bad("FENCE_METHOD_OVERRIDE_HEADERS", "%q is the token or the sequence header", h)
		case slices.Contains(builtinOverrideHeaders, canon):
			// Read anyway; listing it is harmless.
		case slices.Contains(out, canon):
			bad("FENCE_METHOD_OVERRIDE_HEADERS", "%q is listed twice", h)
		default:
			out = append(out, canon)
		}
	}
	return out
}
