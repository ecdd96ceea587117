package config

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
)

// uintType is the parameter type {name:uint}: a canonical unsigned integer.
const uintType = "uint"

// pattern is a parsed chi routing pattern.
type pattern struct {
	params   []string // parameter names, in order
	uints    []string // the parameters typed {name:uint}
	wildcard bool     // the pattern ends in "/*"
	// chi is the pattern as chi matches it: {name:uint} is {name}, a plain
	// parameter, so that every spelling of a number reaches the route and a
	// non-canonical one ("07", "+7") is refused there rather than escaping
	// to another rule.
	chi string
	// key is the pattern with parameter names erased ("/orders/{}",
	// "/orders/{:[0-9]+}"): two patterns with the same key match the same
	// requests.
	key string
}

// PatternParams returns the parameter names of a chi routing pattern, in
// order ("/orders/{orderID}/items/{item:[0-9]+}" gives orderID, item; a
// trailing "/*" is not a name), or why the pattern is invalid.
//
// A valid pattern starts with '/', has balanced braces, parameter names
// matching [A-Za-z_][A-Za-z0-9_]* and unique within the pattern, a regular
// expression that compiles after any ':', text between two parameters, and a
// '*' only as the final segment "/*". Because requests are matched on their
// canonical path, a pattern also may not hold what a canonical path never
// does: an empty segment ("//"), a "." or ".." segment, a trailing slash
// (except "/" itself), ';', '\\', '?', '#' or a control character. Every
// valid pattern can be registered with chi without a panic.
//
// {name:uint} is not a regular expression but a type: the segment must be a
// canonical unsigned integer (the proxy refuses "07", "+7" or "7.0" with 400,
// since frameworks parse those as 7 and they would escape the mark of "7").
func PatternParams(pattern string) ([]string, error) {
	p, err := parsePattern(pattern)
	if err != nil {
		return nil, err
	}
	return p.params, nil
}

// parsePattern parses and checks a chi routing pattern; see PatternParams.
func parsePattern(s string) (pattern, error) {
	var p pattern
	if s == "" {
		return p, fmt.Errorf("required")
	}
	if s[0] != '/' {
		return p, fmt.Errorf("%q must start with '/'", s)
	}
	var key, skeleton, chi strings.Builder // skeleton: every parameter as "{}"
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '{':
			end := closingBrace(s, i)
			if end < 0 {
				return p, fmt.Errorf("%q: '{' at offset %d is never closed", s, i)
			}
			if s[i-1] == '}' {
				return p, fmt.Errorf("%q: two parameters must be separated by text", s)
			}
			name, expr, isRegexp := strings.Cut(s[i+1:end], ":")
			if !validParamName(name) {
				return p, fmt.Errorf("%q: parameter name %q is not valid (want [A-Za-z_][A-Za-z0-9_]*)", s, name)
			}
			if slices.Contains(p.params, name) {
				return p, fmt.Errorf("%q: parameter {%s} appears twice", s, name)
			}
			key.WriteByte('{')
			chi.WriteString("{" + name)
			switch {
			case isRegexp && expr == uintType:
				p.uints = append(p.uints, name)
			case isRegexp:
				if expr == "" {
					return p, fmt.Errorf("%q: parameter {%s:} has an empty regular expression", s, name)
				}
				if _, err := regexp.Compile(expr); err != nil {
					return p, fmt.Errorf("%q: parameter {%s}: invalid regular expression: %s", s, name, regexpProblem(err))
				}
				key.WriteString(":" + expr)
				chi.WriteString(":" + expr)
			}
			key.WriteByte('}')
			chi.WriteByte('}')
			skeleton.WriteString("{}")
			p.params = append(p.params, name)
			i = end + 1
			continue
		case c == '}':
			return p, fmt.Errorf("%q: '}' at offset %d has no '{'", s, i)
		case c == '*':
			if i != len(s)-1 || s[i-1] != '/' {
				return p, fmt.Errorf("%q: '*' is allowed only as the final segment \"/*\"", s)
			}
			p.wildcard = true
		case c < 0x20 || c == 0x7f:
			return p, fmt.Errorf("%q: control character at offset %d", s, i)
		case c == ';' || c == '\\' || c == '?' || c == '#':
			return p, fmt.Errorf("%q: %q never occurs in a canonical request path", s, c)
		}
		key.WriteByte(c)
		skeleton.WriteByte(c)
		chi.WriteByte(c)
		i++
	}
	sk := skeleton.String()
	if len(sk) > 1 && strings.HasSuffix(sk, "/") {
		return p, fmt.Errorf("%q: a trailing slash never matches (matching ignores a trailing slash)", s)
	}
	for _, seg := range strings.Split(sk[1:], "/") {
		switch seg {
		case "":
			if sk != "/" {
				return p, fmt.Errorf("%q: empty segment never matches (repeated slashes are merged)", s)
			}
		case ".", "..":
			return p, fmt.Errorf("%q: segment %q never matches (dot segments are resolved)", s, seg)
		}
	}
	p.key = key.String()
	p.chi = chi.String()
	return p, nil
}

// foldPattern folds the literal text of a chi pattern with FoldPath, leaving
// what is inside braces (names, regular expressions) as written: a
// case-insensitive route matches the folded request path.
func foldPattern(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] == '{' {
			end := closingBrace(s, i)
			b.WriteString(s[i : end+1])
			i = end + 1
			continue
		}
		end := strings.IndexByte(s[i:], '{')
		if end < 0 {
			end = len(s) - i
		}
		b.WriteString(FoldPath(s[i : i+end]))
		i += end
	}
	return b.String()
}

// regexpProblem describes a regexp.Compile error on one line.
func regexpProblem(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%s: %q", se.Code, se.Expr)
	}
	return strconv.Quote(err.Error())
}

// closingBrace returns the index of the '}' closing the '{' at s[open],
// counting nested braces the way chi does, or -1.
func closingBrace(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// validParamName reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func validParamName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
