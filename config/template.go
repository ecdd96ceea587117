package config

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// errNotParam marks a {name} placeholder that names no path parameter.
var errNotParam = errors.New("is not a parameter of the path")

// ParseTemplate parses a resource template: literal text and placeholders
// {name} (a parameter of the route's path; params lists them), {*} (the
// value matched by a trailing "/*"; only when allowWildcard), {header:Name}
// (a valid header name, stored in canonical MIME form) and {query:name} (a
// non-empty query parameter name). Braces cannot be escaped: a '{' always
// opens a placeholder and a '}' always closes one.
//
// An empty template, unbalanced braces, an empty placeholder, an unknown
// placeholder kind such as {cookie:x} and a parameter not in params are
// errors. Adjacent literal text is one Part, and the returned Raw is the
// template's canonical spelling, Template.String (s with header names in
// canonical form).
func ParseTemplate(s string, params []string, allowWildcard bool) (Template, error) {
	if s == "" {
		return Template{}, errors.New("empty template")
	}
	var parts []Part
	for i := 0; i < len(s); {
		switch s[i] {
		case '}':
			return Template{}, fmt.Errorf("%q: '}' at offset %d has no '{'", s, i)
		case '{':
			n := strings.IndexAny(s[i+1:], "{}")
			if n < 0 || s[i+1+n] == '{' {
				return Template{}, fmt.Errorf("%q: '{' at offset %d is never closed", s, i)
			}
			part, err := parsePlaceholder(s[i+1:i+1+n], params, allowWildcard)
			if err != nil {
				return Template{}, fmt.Errorf("%q: %w", s, err)
			}
			parts = append(parts, part)
			i += n + 2
		default:
			n := strings.IndexAny(s[i:], "{}")
			if n < 0 {
				n = len(s) - i
			}
			parts = append(parts, Part{Kind: PartLiteral, Value: s[i : i+n]})
			i += n
		}
	}
	t := Template{Parts: parts}
	t.Raw = t.String()
	return t, nil
}

// parsePlaceholder parses the text between a template's braces.
func parsePlaceholder(body string, params []string, allowWildcard bool) (Part, error) {
	kind, arg, hasKind := strings.Cut(body, ":")
	shown := shownPlaceholder(body)
	switch {
	case body == "":
		return Part{}, errors.New("empty placeholder {}")
	case body == "*":
		if !allowWildcard {
			return Part{}, errors.New("{*} needs a path ending in \"/*\"")
		}
		return Part{Kind: PartParam, Value: "*"}, nil
	case !hasKind:
		if !slices.Contains(params, body) {
			have := "it has none"
			if len(params) > 0 {
				have = "it has " + strings.Join(params, ", ")
			}
			return Part{}, fmt.Errorf("%s %w (%s)", shown, errNotParam, have)
		}
		return Part{Kind: PartParam, Value: body}, nil
	case kind == "header":
		if !validHeaderName(arg) {
			return Part{}, fmt.Errorf("%s: %q is not a valid header name", shown, arg)
		}
		name := textproto.CanonicalMIMEHeaderKey(arg)
		if why := unseenHeader(name); why != "" {
			return Part{}, fmt.Errorf("%s: %s, so the upstream would not see the value that named the resource", shown, why)
		}
		return Part{Kind: PartHeader, Value: name}, nil
	case kind == "query":
		if arg == "" {
			return Part{}, fmt.Errorf("%s: empty query parameter name", shown)
		}
		return Part{Kind: PartQuery, Value: arg}, nil
	default:
		return Part{}, fmt.Errorf("%s: unknown placeholder kind %q (want {param}, {header:Name} or {query:name})", shown, kind)
	}
}

// shownPlaceholder spells the placeholder {body} for an error message: as
// written, or quoted when it holds a character that would not show as itself
// (a newline would split one problem over two lines).
func shownPlaceholder(body string) string {
	s := "{" + body + "}"
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// String returns the template in the routes file's syntax, with header names
// in canonical form; ParseTemplate sets Raw to it.
func (t Template) String() string {
	var b strings.Builder
	for _, p := range t.Parts {
		switch p.Kind {
		case PartLiteral:
			b.WriteString(p.Value)
		case PartParam:
			b.WriteString("{" + p.Value + "}")
		case PartHeader:
			b.WriteString("{header:" + p.Value + "}")
		case PartQuery:
			b.WriteString("{query:" + p.Value + "}")
		}
	}
	return b.String()
}
