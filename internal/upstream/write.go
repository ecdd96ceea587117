package upstream

import (
	"bufio"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req to bw as (*http.Request).Write does, byte for
// byte. (*http.Request).Write formats the request line through fmt, sorts
// the header fields through an interface sort and passes every value
// through a strings.Replacer; under load that was a few percent of the
// proxy's CPU. The common request is written here, with the same bytes
// (TestWriteRequestBytes and FuzzWriteRequest compare the two); anything
// this does not write the same way (see plainRequest) goes to
// (*http.Request).Write. Either way req.Body is closed. One difference: a
// body's read error is returned as it is, as http.Transport returns it,
// where (*http.Request).Write wraps it in a type of its own. And a client
// trace's write hooks (WroteHeaderField, WroteHeaders, WroteRequest) are
// not called: nothing of fenceproxy's sets them.
//
// The header names are not checked: the inline path takes only requests
// whose names are valid (inline), and (*http.Request).Write would drop an
// invalid one.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	host, ok := plainRequest(req)
	ruri := ""
	if ok {
		ruri = req.URL.RequestURI()
		ok = !containsCTL(ruri)
	}
	if !ok {
		return req.Write(noHeaderFlush{bw})
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := "Go-http-client/1.1"
	if _, ok := req.Header["User-Agent"]; ok {
		ua = req.Header.Get("User-Agent")
	}
	if ua != "" { // checked before the trim, as net/http does
		bw.WriteString("User-Agent: ")
		bw.WriteString(trimValue(ua))
		bw.WriteString("\r\n")
	}
	cl := outgoingLength(req)
	switch {
	case cl > 0, cl == 0 && (method == "POST" || method == "PUT" || method == "PATCH"):
		// net/http's shouldSendContentLength, for a length known.
		var digits [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(digits[:0], cl, 10))
		bw.WriteString("\r\n")
	}
	var stack [32]string
	keys := stack[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // net/http's reqWriteExcludeHeader
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range req.Header[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(trimValue(v))
			bw.WriteString("\r\n")
		}
	}
	_, err := bw.WriteString("\r\n")
	if req.Body == nil {
		return err
	}
	if err != nil {
		_ = req.Body.Close()
		return err
	}
	// As net/http's transferWriter: the declared length is written, what
	// follows it is read and discarded, the body is closed, and a body of
	// another length is an error.
	n, err := io.Copy(bw, io.LimitReader(req.Body, cl))
	if err == nil {
		var extra int64
		extra, err = io.Copy(io.Discard, req.Body)
		n += extra
	}
	if err != nil {
		_ = req.Body.Close()
		return err
	}
	if err := req.Body.Close(); err != nil {
		return err
	}
	if n != cl {
		return &bodyLengthError{declared: cl, got: n}
	}
	return nil
}

// bodyLengthError is net/http's error for a body whose length is not its
// ContentLength.
type bodyLengthError struct{ declared, got int64 }

func (e *bodyLengthError) Error() string {
	return "http: ContentLength=" + strconv.FormatInt(e.declared, 10) + " with Body length " + strconv.FormatInt(e.got, 10)
}

// plainRequest reports whether writeRequest writes req as
// (*http.Request).Write would (the request URI aside, see containsCTL),
// and returns its Host header's value: a Host with nothing for net/http to
// convert or blank (an ASCII host without an IPv6 zone), a body of known
// length or none, and no Connection: close, transfer coding or trailers of
// its own to announce.
func plainRequest(req *http.Request) (string, bool) {
	if req.Close || len(req.TransferEncoding) != 0 || req.Trailer != nil || req.URL.Opaque != "" {
		return "", false
	}
	if body := req.Body != nil && req.Body != http.NoBody; body && req.ContentLength <= 0 || !body && req.ContentLength != 0 {
		return "", false // chunked, probed, or refused by net/http
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c >= 0x80 || c == '%' {
			return "", false // punycode, or a zone to remove
		}
	}
	if !httpguts.ValidHostHeader(host) {
		return "", false // net/http sends an empty Host instead
	}
	return host, true
}

// containsCTL is net/http's check of a request URI it will not write.
func containsCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// outgoingLength is net/http's: the body's length, 0 for none.
func outgoingLength(req *http.Request) int64 {
	if req.Body == nil || req.Body == http.NoBody {
		return 0
	}
	return req.ContentLength
}

// trimValue is what net/http does to a header value it writes: each CR
// and LF to a space, then leading and trailing white space trimmed.
func trimValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		v = newlineToSpace.Replace(v)
	}
	return textproto.TrimString(v)
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")
