package proxy

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unsafe"
)

func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     string
		trailing bool
		wantErr  *PathError
	}{
		// Already canonical: returned as is.
		{name: "canonical", in: "/orders/42", want: "/orders/42"},
		{name: "root", in: "/", want: "/"},
		{name: "empty is root", in: "", want: "/"},
		{name: "three dots is a name", in: "/a/.../b", want: "/a/.../b"},
		{name: "dot prefix is a name", in: "/a/..b/.c", want: "/a/..b/.c"},
		{name: "raw UTF-8", in: "/café", want: "/café"},
		{name: "raw invalid UTF-8", in: "/\xff\xfe", want: "/\xff\xfe"},
		{name: "other sub-delims kept", in: "/a:b@c!$&'()*+,=~", want: "/a:b@c!$&'()*+,=~"},

		// Slashes.
		{name: "trailing slash", in: "/orders/42/", want: "/orders/42", trailing: true},
		{name: "double slash", in: "/orders//42", want: "/orders/42"},
		{name: "only slashes", in: "//", want: "/"},
		{name: "slashes around", in: "///a///", want: "/a", trailing: true},
		{name: "slashes merged before dots", in: "/a//..", want: "/"},

		// Dot segments.
		{name: "leading dot", in: "/./orders/42", want: "/orders/42"},
		{name: "dot dot", in: "/orders/x/../42", want: "/orders/42"},
		{name: "encoded dot dot", in: "/a/%2e%2e/b", want: "/b"},
		{name: "encoded dot", in: "/a/%2E/b", want: "/a/b"},
		{name: "half encoded dot dot", in: "/a/.%2e/b", want: "/b"},
		{name: "half encoded dot dot upper", in: "/a/%2E./b", want: "/b"},
		{name: "encoded three dots is a name", in: "/a/%2e%2e%2e", want: "/a/..."},
		{name: "encoded dot prefix is a name", in: "/a/%2ex", want: "/a/.x"},
		{name: "dot dot at root", in: "/..", want: "/"},
		{name: "dot dot twice at root", in: "/../..", want: "/"},
		{name: "clamped at root", in: "/../a", want: "/a"},
		{name: "climb past root", in: "/a/b/../../../c", want: "/c"},
		{name: "up to root", in: "/a/..", want: "/"},
		{name: "up to root with slash", in: "/a/../", want: "/"},
		{name: "encoded dot at root", in: "/%2e", want: "/"},
		{name: "dot dot last is trailing", in: "/a/b/..", want: "/a", trailing: true},
		{name: "dot last is trailing", in: "/a/.", want: "/a", trailing: true},
		{name: "encoded dot dot last is trailing", in: "/a/b/%2E%2e", want: "/a", trailing: true},
		{name: "dots and slashes", in: "/a/./b/./", want: "/a/b", trailing: true},
		{name: "dot dot then name", in: "/a/b/../c/", want: "/a/c", trailing: true},

		// Decoding.
		{name: "encoded digits", in: "/orders/%34%32", want: "/orders/42"},
		{name: "encoded UTF-8", in: "/caf%C3%A9", want: "/café"},
		{name: "encoded UTF-8 lower hex", in: "/caf%c3%a9", want: "/café"},
		{name: "encoded high byte", in: "/%FF", want: "/\xff"},
		{name: "encoded space", in: "/a%20b", want: "/a b"},
		{name: "encoded question mark", in: "/a%3Fb", want: "/a?b"},
		{name: "encoded hash", in: "/a%23b", want: "/a#b"},
		{name: "encoded percent decoded once", in: "/a%25b", want: "/a%b"},
		{name: "double encoded slash decoded once", in: "/a%252Fb", want: "/a%2Fb"},
		{name: "encoded unreserved", in: "/%61%62%63", want: "/abc"},

		// Refused.
		{name: "relative", in: "a/b", wantErr: errPathNotAbsolute},
		{name: "asterisk", in: "*", wantErr: errPathNotAbsolute},
		{name: "encoded slash", in: "/orders%2F42", wantErr: errPathEncodedSlash},
		{name: "encoded slash lower", in: "/orders%2f42", wantErr: errPathEncodedSlash},
		{name: "encoded slash in removed segment", in: "/a/%2F/..", wantErr: errPathEncodedSlash},
		{name: "encoded backslash lower", in: "/%5cb", wantErr: errPathEncodedBackslash},
		{name: "encoded backslash", in: "/%5Cb", wantErr: errPathEncodedBackslash},
		{name: "backslash", in: "/a\\b", wantErr: errPathBackslash},
		{name: "semicolon", in: "/orders/42;x=1", wantErr: errPathSemicolon},
		{name: "encoded semicolon", in: "/orders/%3B", wantErr: errPathSemicolon},
		{name: "encoded semicolon lower", in: "/orders/%3b", wantErr: errPathSemicolon},
		{name: "semicolon in removed segment", in: "/a;/..", wantErr: errPathSemicolon},
		{name: "encoded NUL", in: "/%00", wantErr: errPathControl},
		{name: "NUL", in: "/a\x00", wantErr: errPathControl},
		{name: "unit separator", in: "/a\x1f", wantErr: errPathControl},
		{name: "DEL", in: "/a\x7f", wantErr: errPathControl},
		{name: "encoded DEL", in: "/%7F", wantErr: errPathControl},
		{name: "encoded LF", in: "/%0a", wantErr: errPathControl},
		{name: "encoded CR", in: "/%0D", wantErr: errPathControl},
		{name: "bad escape letters", in: "/%zz", wantErr: errPathBadEscape},
		{name: "bare percent", in: "/%", wantErr: errPathBadEscape},
		{name: "escape bad first digit", in: "/%g1", wantErr: errPathBadEscape},
		{name: "escape one digit", in: "/%4", wantErr: errPathBadEscape},
		{name: "escape bad second digit", in: "/%4g/x", wantErr: errPathBadEscape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, trailing, err := CanonicalPath(tt.in)
			if tt.wantErr != nil {
				if err != tt.wantErr {
					t.Fatalf("CanonicalPath(%q) = %q, %v, %v; want error %v", tt.in, got, trailing, err, tt.wantErr)
				}
				if got != "" || trailing {
					t.Errorf("CanonicalPath(%q) = %q, %v with an error; want \"\", false", tt.in, got, trailing)
				}
				return
			}
			if err != nil {
				t.Fatalf("CanonicalPath(%q) error = %v", tt.in, err)
			}
			if got != tt.want || trailing != tt.trailing {
				t.Errorf("CanonicalPath(%q) = %q, %v; want %q, %v", tt.in, got, trailing, tt.want, tt.trailing)
			}
		})
	}
}

// TestCanonicalPathReturnsInput checks that a canonical input comes back as
// the same string, not a copy: that is what makes the common case free.
func TestCanonicalPathReturnsInput(t *testing.T) {
	for _, in := range []string{"/orders/42", "/a/.../b", "/café"} {
		t.Run(in, func(t *testing.T) {
			got, _, err := CanonicalPath(in)
			if err != nil {
				t.Fatal(err)
			}
			if unsafe.StringData(got) != unsafe.StringData(in) {
				t.Errorf("CanonicalPath(%q) returned a copy", in)
			}
		})
	}
}

func TestPathErrorAs(t *testing.T) {
	_, _, err := CanonicalPath("/a%2Fb")
	var pe *PathError
	if !errors.As(err, &pe) {
		t.Fatalf("errors.As(%v, *PathError) = false", err)
	}
	if got, want := err.Error(), "ambiguous path: encoded slash"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestPathErrorReasonsDistinct(t *testing.T) {
	all := []*PathError{
		errPathNotAbsolute, errPathEncodedSlash, errPathEncodedBackslash, errPathBackslash,
		errPathControl, errPathSemicolon, errPathBadEscape,
	}
	seen := map[string]bool{}
	for _, e := range all {
		if e.Reason == "" || seen[e.Reason] {
			t.Errorf("reason %q is empty or repeated", e.Reason)
		}
		seen[e.Reason] = true
	}
}

// TestCanonicalPathLong exercises a path far longer than any buffer a
// future optimisation might keep on the stack.
func TestCanonicalPathLong(t *testing.T) {
	seg := strings.Repeat("x", 100)
	in := strings.Repeat("/"+seg+"/./y/..", 100) + "/"
	want := strings.Repeat("/"+seg, 100)
	got, trailing, err := CanonicalPath(in)
	if err != nil || got != want || !trailing {
		t.Fatalf("CanonicalPath(long) = %d bytes, %v, %v; want %d bytes, true, nil", len(got), trailing, err, len(want))
	}
	deep := strings.Repeat("/..", 10000) + "/a"
	if got, _, err := CanonicalPath(deep); err != nil || got != "/a" {
		t.Fatalf("CanonicalPath(deep) = %q, %v; want \"/a\"", got, err)
	}
}

// referenceCanonicalPath is the slow, obvious statement of the rules the
// fuzz target holds CanonicalPath to: split on '/', decode each segment with
// net/url, then a stack for the dot segments. It says only whether the path
// is refused, not why.
func referenceCanonicalPath(escaped string) (string, bool, bool) {
	if escaped == "" {
		return "/", false, true
	}
	if escaped[0] != '/' || strings.Contains(escaped, `\`) {
		return "", false, false
	}
	var stack []string
	segs := strings.Split(escaped[1:], "/")
	var last string
	for _, raw := range segs {
		seg, err := url.PathUnescape(raw)
		if err != nil {
			return "", false, false
		}
		for i := 0; i < len(seg); i++ {
			if c := seg[i]; c < 0x20 || c == 0x7f || c == ';' || c == '/' || c == '\\' {
				return "", false, false
			}
		}
		last = seg
		switch seg {
		case "", ".":
		case "..":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		default:
			stack = append(stack, seg)
		}
	}
	if len(stack) == 0 {
		return "/", false, true
	}
	trailing := last == "" || last == "." || last == ".."
	return "/" + strings.Join(stack, "/"), trailing, true
}

// reencodePath escapes each segment of a canonical path with url.PathEscape,
// as a client that built the URL from the canonical path would.
func reencodePath(canon string) string {
	segs := strings.Split(canon, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{
		"/orders/42", "/orders/42/", "/orders//42", "/./orders/42", "/orders/x/../42",
		"/orders/%34%32", "/orders%2F42", "/orders/42;x=1", "/orders/%3B", "/a/%2e%2e/b",
		"/a/%2E/b", "/..", "/../..", "/a/..", "//", "///a///", "", "/%00", "/a\\b", "/%5cb",
		"/%zz", "/%", "/caf%C3%A9", "/a%20b", "/a%3Fb", "/a%25b", "*", "/a/b/..", "/a/.%2e",
		"/%2e%2e%2e", "/\xff", "/%FF", "/a//..", "/a%252Fb",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, trailing, err := CanonicalPath(in)

		want, wantTrailing, ok := referenceCanonicalPath(in)
		if (err == nil) != ok {
			t.Fatalf("CanonicalPath(%q) error = %v; reference accepts = %v", in, err, ok)
		}
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("CanonicalPath(%q) error %T %v, want *PathError", in, err, err)
			}
			if got != "" || trailing {
				t.Fatalf("CanonicalPath(%q) = %q, %v with an error", in, got, trailing)
			}
			return
		}
		if got != want || trailing != wantTrailing {
			t.Fatalf("CanonicalPath(%q) = %q, %v; reference = %q, %v", in, got, trailing, want, wantTrailing)
		}

		// The shape of a canonical path, stated directly.
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("CanonicalPath(%q) = %q, not absolute", in, got)
		}
		for _, bad := range []string{"//", "/./", "/../"} {
			if strings.Contains(got, bad) {
				t.Fatalf("CanonicalPath(%q) = %q, contains %q", in, got, bad)
			}
		}
		if got != "/" && (strings.HasSuffix(got, "/") || strings.HasSuffix(got, "/.") || strings.HasSuffix(got, "/..")) {
			t.Fatalf("CanonicalPath(%q) = %q, has a trailing slash or dot segment", in, got)
		}
		if got == "/" && trailing {
			t.Fatalf("CanonicalPath(%q) = \"/\" with trailing slash", in)
		}
		for i := 0; i < len(got); i++ {
			if c := got[i]; c < 0x20 || c == 0x7f || c == ';' || c == '\\' {
				t.Fatalf("CanonicalPath(%q) = %q, contains byte %#x", in, got, c)
			}
		}

		// Idempotent through re-encoding: a client that escapes the
		// canonical path lands on the same canonical path.
		re := reencodePath(got)
		again, againTrailing, err := CanonicalPath(re)
		if err != nil || again != got || againTrailing {
			t.Fatalf("CanonicalPath(reencode(%q) = %q) = %q, %v, %v; want %q, false, nil", got, re, again, againTrailing, err, got)
		}
		// Idempotent as is, when the decoded output has no '%' to be read
		// as an escape again.
		if !strings.Contains(got, "%") {
			again, againTrailing, err := CanonicalPath(got)
			if err != nil || again != got || againTrailing {
				t.Fatalf("CanonicalPath(%q) = %q, %v, %v; want it unchanged", got, again, againTrailing, err)
			}
		}
	})
}
