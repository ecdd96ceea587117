package proxy

import (
	"strings"
	"unsafe"
)

// PathError reports a request path that fenceproxy refuses because the
// components behind it could read it as a different path than the one that
// was fenced. Reason is a short fixed phrase; it never echoes the path.
//
// CanonicalPath returns one shared *PathError per reason, so that refusing a
// path allocates nothing; treat the value as read-only.
type PathError struct {
	Reason string
}

func (e *PathError) Error() string { return "ambiguous path: " + e.Reason }

var (
	errPathNotAbsolute      = &PathError{Reason: "does not start with '/'"}
	errPathEncodedSlash     = &PathError{Reason: "encoded slash"}
	errPathEncodedBackslash = &PathError{Reason: "encoded backslash"}
	errPathBackslash        = &PathError{Reason: "backslash"}
	errPathControl          = &PathError{Reason: "control character"}
	errPathSemicolon        = &PathError{Reason: "semicolon"}
	errPathBadEscape        = &PathError{Reason: "invalid percent-escape"}
)

// CanonicalPath turns the request's escaped path (r.URL.EscapedPath()) into
// the decoded canonical path used for matching. Fencing is only as good as
// the match: any two spellings of a path that the upstream would serve as the
// same resource must canonicalise to the same string, or one spelling escapes
// the other's fence.
//
// The canonical path is percent-decoded; its dot segments ("." and "..",
// also when percent-encoded such as "%2e%2E") are resolved as RFC 3986
// remove_dot_segments does, clamped at the root ("/../a" is "/a"); repeated
// slashes are merged (before dot segments are resolved, so "/a//.." is "/");
// and a trailing slash is removed unless the path is "/". The empty path is
// "/". trailingSlash reports whether the path, after dot segments were
// resolved, ended in a slash ("/a/", "/a/.", "/a/b/.."), so that the caller
// can forward canon+"/" as sent; it is false when canon is "/".
//
// It refuses with a *PathError what cannot be canonicalised without guessing
// how the upstream reads it: an encoded slash or backslash (%2F, %5C: one
// server splits on it, another does not); a literal backslash (some servers
// treat it as a slash); a control byte, NUL included, literal or encoded;
// a ';' literal or encoded (many frameworks strip ";params", so "/a;x" could
// reach "/a" under another route's fence); an invalid percent-escape; and a
// path that does not start with '/' ("*", "a/b"). Bytes 0x80 and above are
// accepted, raw or percent-encoded, and kept as bytes: the path is not
// required to be UTF-8, and nothing is Unicode-normalised.
//
// canon is decoded, so it is not a valid escaped path: it may contain '%',
// '?', '#' or a space. The caller matches on it and forwards it by setting
// URL.Path (with an empty RawPath), letting net/url escape it again.
//
// It runs in O(len(escaped)). An already canonical input is returned as is,
// and a refusal is a shared value, without allocating; otherwise canon costs
// one allocation (none when it is "/").
func CanonicalPath(escaped string) (canon string, trailingSlash bool, err error) {
	if escaped == "" {
		return "/", false, nil
	}
	if escaped[0] != '/' {
		return "", false, errPathNotAbsolute
	}
	canonical, pe := checkPath(escaped)
	if pe != nil {
		return "", false, pe
	}
	if canonical {
		// The common case: return the caller's string, allocate nothing.
		return escaped, false, nil
	}
	n, trailing := resolvePath(escaped, nil)
	if n == 1 { // resolved to the root: "//", "/..", "/a/.."
		return "/", false, nil
	}
	buf := make([]byte, n)
	resolvePath(escaped, buf)
	// buf is written once above and never again, so it can back the string
	// without the copy string(buf) would make: strings.Clone and
	// strings.Builder do the same. This keeps the cost to one allocation.
	return unsafe.String(unsafe.SliceData(buf), n), trailing, nil
}

// checkPath refuses the bytes and escapes CanonicalPath does not accept,
// anywhere in s, including in segments that ".." would remove: what the
// upstream does with them is not ours to guess. In the same pass it reports
// whether s, which starts with '/', is already canonical: no escape, no
// empty, "." or ".." segment, no trailing slash (the root "/" aside).
func checkPath(s string) (canonical bool, _ *PathError) {
	canonical = true
	seg := 1 // start of the current segment, just past a '/'
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '/':
			if canonical && pathDotOrEmpty(s[seg:i]) {
				canonical = false
			}
			seg = i + 1
			continue
		case '\\':
			return false, errPathBackslash
		case '%':
			canonical = false
			if i+2 >= len(s) {
				return false, errPathBadEscape
			}
			hi, ok1 := pathUnhex(s[i+1])
			lo, ok2 := pathUnhex(s[i+2])
			if !ok1 || !ok2 {
				return false, errPathBadEscape
			}
			c = hi<<4 | lo
			i += 2
			switch c {
			case '/':
				return false, errPathEncodedSlash
			case '\\':
				return false, errPathEncodedBackslash
			}
		}
		// Literal and decoded bytes alike.
		switch {
		case c < 0x20 || c == 0x7f:
			return false, errPathControl
		case c == ';':
			return false, errPathSemicolon
		}
	}
	if canonical && len(s) > 1 && pathDotOrEmpty(s[seg:]) {
		canonical = false
	}
	return canonical, nil
}

// pathDotOrEmpty reports whether an unescaped segment is "", "." or "..".
func pathDotOrEmpty(seg string) bool {
	return seg == "" || seg == "." || seg == ".."
}

// resolvePath computes the canonical form of s, which checkPath has accepted
// and which starts with '/'. With dst nil it only measures: it returns the
// canonical length and the trailing-slash flag. Otherwise dst has that length
// and resolvePath writes the canonical path into it.
//
// It walks the segments from the right, counting the ".." it has yet to
// apply: a ".." removes the nearest normal segment to its left, so going
// leftwards a normal segment is dropped while that count is positive. This
// is remove_dot_segments with the root clamp (".." left over at the start are
// ignored) in one pass with no stack, which is what lets the measuring pass
// and the writing pass share one allocation-free walk; the output is then
// written right-aligned, last segment first.
func resolvePath(s string, dst []byte) (n int, trailing bool) {
	pending := 0 // ".." seen to the right, not yet applied
	w := len(dst)
	end := len(s)
	last := true
	for end > 0 {
		slash := strings.LastIndexByte(s[:end], '/') // s[0] == '/', so never -1
		seg := s[slash+1 : end]
		end = slash
		dots := pathDotSegment(seg)
		if last {
			// An empty, "." or ".." last segment leaves the resolved
			// path ending in '/'.
			trailing = dots >= 0
			last = false
		}
		switch {
		case dots == 2:
			pending++
			continue
		case dots >= 0: // empty or "."
			continue
		case pending > 0:
			pending--
			continue
		}
		dl := len(seg) - 2*strings.Count(seg, "%")
		n += 1 + dl
		if dst != nil {
			w -= dl
			pathDecode(dst[w:w+dl], seg)
			w--
			dst[w] = '/'
		}
	}
	if n == 0 {
		// Everything resolved away: the root, which has no trailing slash
		// beyond itself.
		if dst != nil {
			dst[0] = '/'
		}
		return 1, false
	}
	return n, trailing
}

// pathDotSegment reports what a raw segment decodes to: 0 for the empty
// segment, 1 for ".", 2 for "..", and -1 for anything else. A '.' may be
// written as %2e or %2E: decoding before resolving is what stops "%2e%2e"
// from climbing out of a fence after the upstream decodes it.
func pathDotSegment(seg string) int {
	dots := 0
	for i := 0; i < len(seg); {
		switch {
		case seg[i] == '.':
			i++
		case seg[i] == '%' && i+2 < len(seg) && seg[i+1] == '2' && (seg[i+2] == 'e' || seg[i+2] == 'E'):
			i += 3
		default:
			return -1
		}
		dots++
		if dots > 2 {
			return -1
		}
	}
	return dots
}

// pathDecode percent-decodes seg, whose escapes checkPath has checked,
// into dst, which has exactly the decoded length.
func pathDecode(dst []byte, seg string) {
	j := 0
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			hi, _ := pathUnhex(seg[i+1])
			lo, _ := pathUnhex(seg[i+2])
			c = hi<<4 | lo
			i += 2
		}
		dst[j] = c
		j++
	}
}

func pathUnhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
