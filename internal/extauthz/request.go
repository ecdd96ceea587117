package extauthz

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"golang.org/x/net/http/httpguts"
)

// malformed is why a CheckRequest cannot become an *http.Request. Its text
// is the detail of the 400 answer, so it never echoes the client's input.
type malformed string

func (m malformed) Error() string { return string(m) }

const (
	errNoHTTP  malformed = "the check request carries no HTTP request attributes"
	errMethod  malformed = "the request method is not a valid HTTP method"
	errTarget  malformed = "the request target is not an origin-form path and query"
	errHost    malformed = "the request host is not a valid authority"
	errHeader  malformed = "a request header name or value is not valid HTTP"
	errTooMany malformed = "the request has too many headers"
)

// maxHeaders bounds the header fields copied from one CheckRequest. Envoy
// bounds a request's headers itself (100 by default); this only keeps a
// hand-made CheckRequest from costing unbounded work.
const maxHeaders = 1000

// Headers through which the HTTP form names the original request. Over gRPC
// they can only come from the client, so they are dropped (see the package
// doc), and the first two are set from Envoy's attributes.
const (
	hdrOriginalMethod  = "X-Original-Method"
	hdrOriginalURI     = "X-Original-Uri"
	hdrForwardedMethod = "X-Forwarded-Method"
	hdrForwardedURI    = "X-Forwarded-Uri"
	hdrRequestID       = "X-Request-Id"
)

// newRequest builds the request that the handler is asked about: the
// original request as Envoy describes it in attributes.request.http, with
// ctx as its context and no body.
func newRequest(ctx context.Context, cr *authv3.CheckRequest) (*http.Request, error) {
	attrs := cr.GetAttributes()
	hr := attrs.GetRequest().GetHttp()
	if hr == nil {
		return nil, errNoHTTP
	}
	if !httpguts.ValidHeaderFieldName(hr.GetMethod()) { // a method is a token, as a field name is
		return nil, errMethod
	}
	target := hr.GetPath()
	u, err := parseTarget(target)
	if err != nil {
		return nil, err
	}

	h, authority, err := copyHeaders(hr)
	if err != nil {
		return nil, err
	}
	host := hr.GetHost()
	if host == "" {
		host = authority
	}
	if !httpguts.ValidHostHeader(host) {
		return nil, errHost
	}
	// The client's X-Original-*/X-Forwarded-* were dropped by copyHeaders;
	// Envoy's method and target take their place, so the handler reads the
	// request Envoy forwards, and never removes FENCE_AUTHZ_PATH_PREFIX
	// from it (that prefix belongs to the HTTP form's own URL).
	h[hdrOriginalMethod] = []string{hr.GetMethod()}
	h[hdrOriginalURI] = []string{target}
	// Envoy's request id names the request in the handler's log lines and
	// answer, when the request's headers do not carry it themselves.
	if _, ok := h[hdrRequestID]; !ok && hr.GetId() != "" {
		h[hdrRequestID] = []string{hr.GetId()}
	}

	switch s := strings.ToLower(hr.GetScheme()); s {
	case "http", "https":
		u.Scheme, u.Host = s, host
	}
	r := &http.Request{
		Method:     hr.GetMethod(),
		URL:        u,
		Header:     h,
		Body:       http.NoBody,
		Host:       host,
		RequestURI: target,
		RemoteAddr: remoteAddr(attrs.GetSource()),
	}
	r.Proto, r.ProtoMajor, r.ProtoMinor = protocol(hr.GetProtocol())
	return r.WithContext(ctx), nil
}

// parseTarget parses an origin-form request target (RFC 9112 section 3.2.1):
// an absolute path, optionally a query. Only visible ASCII is allowed, and
// no fragment, as on the wire; absolute-form, authority-form and "*" are
// refused, since no route of a reverse proxy can fence them.
func parseTarget(target string) (*url.URL, error) {
	if target == "" || target[0] != '/' {
		return nil, errTarget
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return nil, errTarget
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, errTarget
	}
	return u, nil
}

// copyHeaders returns the request headers Envoy sent, in canonical form,
// without pseudo-headers, Host (carried in Request.Host) and the four
// headers of the HTTP form; and the :authority or host header value, for
// when the host attribute is empty.
//
// Envoy sends headers in one of two shapes: the map headers (lower-cased
// names, repeated fields joined by commas), or, with encode_raw_headers,
// header_map (one entry per field, the value in raw_value). header_map
// wins when it has entries. A joined or repeated token header reaches the
// handler as such, and the handler refuses it as malformed.
func copyHeaders(hr *authv3.AttributeContext_HttpRequest) (http.Header, string, error) {
	raw := hr.GetHeaderMap().GetHeaders()
	n := len(raw)
	if n == 0 {
		n = len(hr.GetHeaders())
	}
	if n > maxHeaders {
		return nil, "", errTooMany
	}
	c := headerCopy{h: make(http.Header, n+2), values: make([]string, 0, n)}
	if len(raw) > 0 {
		for _, hv := range raw {
			v := hv.GetValue()
			if rv := hv.GetRawValue(); len(rv) > 0 {
				v = string(rv)
			}
			if err := c.add(hv.GetKey(), v); err != nil {
				return nil, "", err
			}
		}
		return c.h, c.authority, nil
	}
	for k, v := range hr.GetHeaders() {
		if err := c.add(k, v); err != nil {
			return nil, "", err
		}
	}
	return c.h, c.authority, nil
}

// headerCopy collects header fields into h. Single values are slices of
// one backing array, as net/textproto does, so a header costs no
// allocation of its own.
type headerCopy struct {
	h         http.Header
	values    []string
	authority string
}

func (c *headerCopy) add(name, value string) error {
	if name == ":authority" || strings.EqualFold(name, "host") {
		if c.authority == "" {
			c.authority = value
		}
		return nil
	}
	if strings.HasPrefix(name, ":") {
		return nil // :method, :path, :scheme arrive as attributes
	}
	if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
		return errHeader
	}
	key, ok := commonNames[name]
	if !ok {
		key = http.CanonicalHeaderKey(name)
	}
	switch key {
	case hdrOriginalMethod, hdrOriginalURI, hdrForwardedMethod, hdrForwardedURI:
		return nil
	}
	if vv := c.h[key]; vv != nil {
		c.h[key] = append(vv, value)
		return nil
	}
	if len(c.values) < cap(c.values) {
		c.values = append(c.values, value)
		c.h[key] = c.values[len(c.values)-1 : len(c.values) : len(c.values)]
		return nil
	}
	c.h[key] = []string{value}
	return nil
}

// commonNames maps the lower-case names Envoy sends for common headers to
// their canonical form, saving CanonicalHeaderKey's allocation for each.
// Any other name is canonicalised as usual.
var commonNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control", "Content-Length",
		"Content-Type", "Cookie", "Origin", "Referer", "User-Agent", "Via", "Traceparent", "Tracestate",
		"X-Request-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Client-Cert",
		"X-Envoy-Attempt-Count", "X-Envoy-Expected-Rq-Timeout-Ms", "X-Envoy-Internal", "X-Envoy-Peer-Metadata",
		"X-Envoy-Peer-Metadata-Id", "X-B3-Traceid", "X-B3-Spanid", "X-B3-Parentspanid", "X-B3-Sampled",
		"Fencing-Token", "Fencing-Sequence",
		hdrOriginalMethod, hdrOriginalURI, hdrForwardedMethod, hdrForwardedURI,
	} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// protocol maps Envoy's protocol attribute ("HTTP/1.0", "HTTP/1.1",
// "HTTP/2", "HTTP/3") to Request.Proto and its numbers; anything else is
// taken as HTTP/1.1.
func protocol(p string) (string, int, int) {
	switch p {
	case "HTTP/1.0":
		return p, 1, 0
	case "HTTP/2", "HTTP/2.0":
		return "HTTP/2.0", 2, 0
	case "HTTP/3", "HTTP/3.0":
		return "HTTP/3.0", 3, 0
	}
	return "HTTP/1.1", 1, 1
}

// remoteAddr is the downstream peer as "host:port", or "" when Envoy did
// not send a socket address.
func remoteAddr(src *authv3.AttributeContext_Peer) string {
	sa := src.GetAddress().GetSocketAddress()
	if sa.GetAddress() == "" {
		return ""
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
}
