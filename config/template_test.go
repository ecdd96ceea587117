package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	params := []string{"orderID", "item"}
	tests := []struct {
		in       string
		wildcard bool
		want     Template
	}{
		{"default", false, Template{Raw: "default", Parts: []Part{lit("default")}}},
		{"orders/{orderID}", false, Template{Raw: "orders/{orderID}", Parts: []Part{lit("orders/"), param("orderID")}}},
		{"{orderID}{item}", false, Template{Raw: "{orderID}{item}", Parts: []Part{param("orderID"), param("item")}}},
		{"files/{*}", true, Template{Raw: "files/{*}", Parts: []Part{lit("files/"), param("*")}}},
		{"t/{header:x-tenant-id}", false, Template{Raw: "t/{header:X-Tenant-Id}", Parts: []Part{lit("t/"), header("X-Tenant-Id")}}},
		{"{query:job id}/x", false, Template{Raw: "{query:job id}/x", Parts: []Part{query("job id"), lit("/x")}}},
		{"{query:a:b}", false, Template{Raw: "{query:a:b}", Parts: []Part{query("a:b")}}},
		{"a:b/ü", false, Template{Raw: "a:b/ü", Parts: []Part{lit("a:b/ü")}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTemplate(tt.in, params, tt.wildcard)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if got.String() != got.Raw {
				t.Errorf("String() = %q, Raw = %q", got.String(), got.Raw)
			}
		})
	}
}

func TestParseTemplateInvalid(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", "empty template"},
		{"a/{", `"a/{": '{' at offset 2 is never closed`},
		{"a/{b{c}}", `"a/{b{c}}": '{' at offset 2 is never closed`},
		{"a}", `"a}": '}' at offset 1 has no '{'`},
		{"{orderID}}", `'}' at offset 9 has no '{'`},
		{"{}", "empty placeholder {}"},
		{"{nope}", "{nope} is not a parameter of the path (it has orderID)"},
		{"{*}", `{*} needs a path ending in "/*"`},
		{"{cookie:x}", `{cookie:x}: unknown placeholder kind "cookie"`},
		{"{Header:X}", `unknown placeholder kind "Header"`},
		{"{:x}", `unknown placeholder kind ""`},
		{"{header:}", `{header:}: "" is not a valid header name`},
		{"{header:X(1)}", `"X(1)" is not a valid header name`},
		{"{query:}", "{query:}: empty query parameter name"},
		// A placeholder that would not show as itself is quoted: a newline
		// must not split one problem over two lines.
		{"{a\nb}", `"{a\nb}" is not a parameter of the path`},
		{"{cookie\t:x}", `"{cookie\t:x}": unknown placeholder kind "cookie\t"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseTemplate(tt.in, []string{"orderID"}, false)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPatternParams(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		key  string
	}{
		{"/", nil, "/"},
		{"/*", nil, "/*"},
		{"/orders", nil, "/orders"},
		{"/orders/{orderID}", []string{"orderID"}, "/orders/{}"},
		{"/orders/{orderID:[0-9]+}/items/{item}/*", []string{"orderID", "item"}, "/orders/{:[0-9]+}/items/{}/*"},
		{"/o/{id:[0-9]{3}}", []string{"id"}, "/o/{:[0-9]{3}}"},
		{"/a/{x:[a-z]*}", []string{"x"}, "/a/{:[a-z]*}"},
		{"/articles/{slug}.json", []string{"slug"}, "/articles/{}.json"},
		{"/{a}-{b}", []string{"a", "b"}, "/{}-{}"},
		{"/%7E/a b/ü", nil, "/%7E/a b/ü"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := PatternParams(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PatternParams = %q, want %q", got, tt.want)
			}
			if p, _ := parsePattern(tt.in); p.key != tt.key {
				t.Errorf("key = %q, want %q", p.key, tt.key)
			}
		})
	}
}

func TestPatternParamsInvalid(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", "required"},
		{"orders", "must start with '/'"},
		{"/o/{id", "'{' at offset 3 is never closed"},
		{"/o/{id:[0-9]{3}", "'{' at offset 3 is never closed"},
		{"/o/id}", "'}' at offset 5 has no '{'"},
		{"/o/{}", `parameter name "" is not valid`},
		{"/o/{1d}", `parameter name "1d" is not valid`},
		{"/o/{a-b}", `parameter name "a-b" is not valid`},
		{"/o/{id:}", "parameter {id:} has an empty regular expression"},
		{"/o/{id:(}", "parameter {id}: invalid regular expression: missing closing ): \"(\""},
		{"/o/{id}/{id:[0-9]+}", "parameter {id} appears twice"},
		{"/o/{a}{b}", "two parameters must be separated by text"},
		{"/o*", `'*' is allowed only as the final segment "/*"`},
		{"/*/o", `'*' is allowed only as the final segment "/*"`},
		{"/o/**", `'*' is allowed only as the final segment "/*"`},
		{"/o/", "a trailing slash never matches"},
		{"/o//p", "empty segment never matches"},
		{"//", "a trailing slash never matches"},
		{"/o/./p", `segment "." never matches`},
		{"/o/..", `segment ".." never matches`},
		{"/o;v=1", `';' never occurs in a canonical request path`},
		{`/o\p`, `'\\' never occurs`},
		{"/o?x", `'?' never occurs`},
		{"/o#x", `'#' never occurs`},
		{"/o\x00", "control character at offset 2"},
		{"/o\n", "control character at offset 2"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := PatternParams(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
