package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func lit(s string) Part    { return Part{Kind: PartLiteral, Value: s} }
func param(s string) Part  { return Part{Kind: PartParam, Value: s} }
func header(s string) Part { return Part{Kind: PartHeader, Value: s} }
func query(s string) Part  { return Part{Kind: PartQuery, Value: s} }

func TestParseRoutesValid(t *testing.T) {
	const file = `
routes:
  - name: order-writes
    methods: [put, PATCH, Delete]
    path: /orders/{orderID}
    resource: orders/{orderID}
    compare: ">="
    token: required
  - name: order-items
    path: /orders/{orderID:[0-9]+}/items/{item}
    resource: "tenants/{header:x-tenant}/orders/{orderID}/{item}?v={query:version}"
    compare: ">"
    token: optional
  - name: files.v2
    methods: [POST]
    path: /files/*
    resource: files/{*}
  - name: reports
    path: /reports/*
    fence: false
  - name: reports_get
    methods: [GET]
    path: /reports/*
    fence: true
    resource: reports
default:
  methods: [POST, PUT]
  resource: "tenant-{header:X-Tenant}"
  token: optional
`
	got, err := ParseRoutes([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := Routes{
		Routes: []Route{
			{
				Name: "order-writes", Methods: []string{"PUT", "PATCH", "DELETE"}, Path: "/orders/{orderID}", Pattern: "/orders/{orderID}", CaseInsensitive: true, Fence: true,
				Resource: Template{Raw: "orders/{orderID}", Parts: []Part{lit("orders/"), param("orderID")}},
				Compare:  CompareAtLeast,
			},
			{
				Name: "order-items", Methods: []string{"POST", "PUT", "PATCH", "DELETE"}, Path: "/orders/{orderID:[0-9]+}/items/{item}", Pattern: "/orders/{orderID:[0-9]+}/items/{item}", CaseInsensitive: true, Fence: true,
				Resource: Template{
					Raw: "tenants/{header:X-Tenant}/orders/{orderID}/{item}?v={query:version}",
					Parts: []Part{
						lit("tenants/"), header("X-Tenant"), lit("/orders/"), param("orderID"), lit("/"), param("item"),
						lit("?v="), query("version"),
					},
				},
				Compare:       CompareGreater,
				TokenOptional: true,
			},
			{
				Name: "files.v2", Methods: []string{"POST"}, Path: "/files/*", Pattern: "/files/*", CaseInsensitive: true, Fence: true,
				Resource: Template{Raw: "files/{*}", Parts: []Part{lit("files/"), param("*")}},
				Compare:  CompareAtLeast,
			},
			{Name: "reports", Methods: []string{"POST", "PUT", "PATCH", "DELETE"}, Path: "/reports/*", Pattern: "/reports/*", CaseInsensitive: true},
			{
				Name: "reports_get", Methods: []string{"GET"}, Path: "/reports/*", Pattern: "/reports/*", CaseInsensitive: true, Fence: true,
				Resource: Template{Raw: "reports", Parts: []Part{lit("reports")}},
				Compare:  CompareAtLeast,
			},
		},
		Default: Route{
			Name: "default", Methods: []string{"POST", "PUT"}, Fence: true,
			Resource:      Template{Raw: "tenant-{header:X-Tenant}", Parts: []Part{lit("tenant-"), header("X-Tenant")}},
			Compare:       CompareAtLeast,
			TokenOptional: true,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
}

func TestParseRoutesDefaults(t *testing.T) {
	tests := []struct {
		name string
		file string
		want Routes
	}{
		{"one route, no default", "routes:\n  - {name: a, path: /a, resource: a}\n", Routes{
			Routes: []Route{{
				Name: "a", Methods: []string{"POST", "PUT", "PATCH", "DELETE"}, Path: "/a", Pattern: "/a", CaseInsensitive: true, Fence: true,
				Resource: Template{Raw: "a", Parts: []Part{lit("a")}}, Compare: CompareAtLeast,
			}},
			Default: DefaultRoutes().Default,
		}},
		{"default only, unfenced", "default:\n  fence: false\n", Routes{
			Default: Route{Name: "default", Methods: []string{"POST", "PUT", "PATCH", "DELETE"}},
		}},
		{"empty default is the default rule", "routes: []\ndefault: {}\n", DefaultRoutes()},
		{"default resource only", "default:\n  resource: default\n", DefaultRoutes()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRoutes([]byte(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseRoutesInvalid(t *testing.T) {
	// route wraps one route's YAML lines in a file with a valid first route.
	route := func(lines ...string) string {
		return "routes:\n  - name: ok\n    path: /ok\n    resource: ok\n  - " + strings.Join(lines, "\n    ") + "\n"
	}
	tests := []struct {
		name string
		file string
		want []string // substrings of the expected problems, one per problem
	}{
		{"not yaml", "routes: [", []string{"yaml: line 1:"}},
		{"two documents", "routes: []\n---\nroutes: []\n", []string{"more than one YAML document"}},
		{"empty file", "", []string{"no routes"}},
		{"empty routes, no default", "routes: []\n", []string{"no routes"}},
		{"top-level unknown key", "route:\n  - name: a\n", []string{`line 1: unknown key "route"`}},
		{"top-level not a mapping", "- name: a\n", []string{"line 1: cannot use !!seq here: want a mapping with keys routes and default"}},
		{"routes not a list", "routes: {name: a}\n", []string{"line 1: cannot use !!map here: want a list of routes"}},
		{"unknown key", route("name: writes", "path: /w", "resorce: w"),
			[]string{`route "writes": line 7: unknown key "resorce"`}},
		{"unknown key in a nameless route", route("path: /w", "resource: w", "bogus: 1"),
			[]string{`routes[1]: line 7: unknown key "bogus"`}},
		{"key twice", route("name: writes", "path: /w", "resource: w", "path: /x"),
			[]string{`route "writes": line 8: key "path" given twice`}},
		{"fence not a boolean", route("name: writes", "path: /w", "fence: maybe"),
			[]string{"route \"writes\": line 7: cannot use !!str `maybe` here: want true or false"}},
		{"methods not a list", route("name: writes", "path: /w", "resource: w", "methods: PUT"),
			[]string{"route \"writes\": line 8: cannot use !!str `PUT` here: want a list of methods"}},
		{"unknown key in default", "routes: []\ndefault:\n  name: d\n", []string{`default: line 3: unknown key "name"`}},
		{"path in default", "default:\n  path: /x\n", []string{`default: line 2: unknown key "path"`}},
		{"unknown placeholder", route("name: writes", "path: /w/{id}", "resource: w/{cookie:x}"),
			[]string{`route "writes": resource: "w/{cookie:x}": {cookie:x}: unknown placeholder kind "cookie"`}},
		{"param not in path", route("name: writes", "path: /orders/{id}", "resource: orders/{orderID}"),
			[]string{`route "writes": resource: "orders/{orderID}": {orderID} is not a parameter of the path (it has id)`}},
		{"wildcard without /*", route("name: writes", "path: /files/{name}", "resource: files/{*}"),
			[]string{`route "writes": resource: "files/{*}": {*} needs a path ending in "/*"`}},
		{"empty resource", route("name: writes", "path: /w", `resource: ""`),
			[]string{`route "writes": resource: empty template`}},
		{"missing resource", route("name: writes", "path: /w"),
			[]string{`route "writes": resource: required for a fenced route`}},
		{"unbalanced template", route("name: writes", "path: /w", "resource: w/{x"),
			[]string{`route "writes": resource: "w/{x": '{' at offset 2 is never closed`}},
		{"empty placeholder", route("name: writes", "path: /w", "resource: w/{}"),
			[]string{`route "writes": resource: "w/{}": empty placeholder {}`}},
		{"bad header placeholder", route("name: writes", "path: /w", `resource: "w/{header:X Tenant}"`),
			[]string{`route "writes": resource: "w/{header:X Tenant}": {header:X Tenant}: "X Tenant" is not a valid header name`}},
		{"empty query placeholder", route("name: writes", "path: /w", "resource: w/{query:}"),
			[]string{`route "writes": resource: "w/{query:}": {query:}: empty query parameter name`}},
		{"bad compare", route("name: writes", "path: /w", "resource: w", `compare: "=>"`),
			[]string{`route "writes": compare: "=>" must be ">=" or ">"`}},
		{"bad token", route("name: writes", "path: /w", "resource: w", "token: sometimes"),
			[]string{`route "writes": token: "sometimes" must be required or optional`}},
		{"same method and pattern", route("name: again", "path: /ok", "resource: ok", "methods: [GET, PUT]"),
			[]string{`route "again": path: PUT /ok has the same method and pattern as route "ok" (/ok)`}},
		{"same pattern with renamed params",
			"routes:\n  - {name: a, path: '/orders/{id}', resource: 'o/{id}'}\n  - {name: b, path: '/orders/{orderID}', methods: [delete], resource: 'o/{orderID}'}\n",
			[]string{`route "b": path: DELETE /orders/{orderID} has the same method and pattern as route "a" (/orders/{id}); parameter names do not count`}},
		{"same regex pattern with renamed params",
			"routes:\n  - {name: a, path: '/o/{id:[0-9]+}', resource: o}\n  - {name: b, path: '/o/{n:[0-9]+}', fence: false}\n",
			[]string{`route "b": path: POST, PUT, PATCH, DELETE /o/{n:[0-9]+} has the same method and pattern as route "a"`}},
		{"duplicate names", route("name: ok", "path: /other", "resource: x"),
			[]string{`route "ok": name: duplicate (routes[0] and routes[1])`}},
		{"missing name", route("path: /w", "resource: w"), []string{"routes[1]: name: required"}},
		{"bad name", route("name: order writes", "path: /w", "resource: w"),
			[]string{`route "order writes": name: must match [A-Za-z0-9_.-]+`}},
		{"reserved name", route("name: default", "path: /w", "resource: w"),
			[]string{`route "default": name: "default" is reserved for the default rule`}},
		{"missing path", route("name: writes", "resource: w"), []string{`route "writes": path: required`}},
		{"relative path", route("name: writes", "path: w", "resource: w"), []string{`route "writes": path: "w" must start with '/'`}},
		{"bad regex", route("name: writes", "path: '/o/{id:[0-9+}'", "resource: w"),
			[]string{`route "writes": path: "/o/{id:[0-9+}": parameter {id}: invalid regular expression: missing closing ]`}},
		{"unbalanced path", route("name: writes", "path: '/o/{id'", "resource: w"),
			[]string{`route "writes": path: "/o/{id": '{' at offset 3 is never closed`}},
		{"duplicate param", route("name: writes", "path: '/o/{id}/{id}'", "resource: w"),
			[]string{`route "writes": path: "/o/{id}/{id}": parameter {id} appears twice`}},
		{"wildcard inside", route("name: writes", "path: /o/*/x", "resource: w"),
			[]string{`route "writes": path: "/o/*/x": '*' is allowed only as the final segment "/*"`}},
		{"fence false with resource", route("name: writes", "path: /w", "fence: false", "resource: w", "token: optional"),
			[]string{`route "writes": fence: false contradicts resource, token`}},
		{"bad method", route("name: writes", "path: /w", "resource: w", `methods: [PUT, "FE TCH"]`),
			[]string{`route "writes": methods: "FE TCH" is not an HTTP method (a token such as PUT or MKCOL)`}},
		{"bad case", route("name: writes", "path: /w", "resource: w", "case: upper"),
			[]string{`route "writes": case: "upper" must be sensitive or insensitive`}},
		{"forwarded header", route("name: writes", "path: /w", "resource: w/{header:x-forwarded-host}"),
			[]string{`{header:x-forwarded-host}: X-Forwarded-Host is rewritten by the forwarding, so the upstream would not see the value that named the resource`}},
		{"Forwarded header", route("name: writes", "path: /w", "resource: w/{header:Forwarded}"),
			[]string{`Forwarded is rewritten by the forwarding`}},
		{"stripped header", route("name: writes", "path: /w", "resource: w/{header:fence-decision}"),
			[]string{`Fence-Decision is removed from every request before the upstream`}},
		{"header read as the path", route("name: writes", "path: /w", "resource: w/{header:X-Original-URL}"),
			[]string{`X-Original-Url is removed from every request before the upstream`}},
		{"hop-by-hop header", route("name: writes", "path: /w", "resource: w/{header:Upgrade}"),
			[]string{`Upgrade is a hop-by-hop or framing header that the forwarding removes or rewrites`}},
		{"duplicate method", route("name: writes", "path: /w", "resource: w", "methods: [PUT, put]"),
			[]string{`route "writes": methods: PUT listed twice`}},
		{"empty methods", route("name: writes", "path: /w", "resource: w", "methods: []"),
			[]string{`route "writes": methods: empty`}},
		{"default with param", "routes: []\ndefault:\n  resource: orders/{orderID}\n",
			[]string{`default: resource: "orders/{orderID}": {orderID} is not a parameter of the path (it has none); the default rule has no path`}},
		{"default with wildcard", "default:\n  resource: 'f/{*}'\n", []string{`default: resource: "f/{*}": {*} needs a path ending in "/*"`}},
		{"default bad compare", "default:\n  compare: '>>'\n", []string{`default: compare: ">>" must be ">=" or ">"`}},
		{"default fence false with compare", "default:\n  fence: false\n  compare: '>'\n", []string{"default: fence: false contradicts compare"}},
		{"bad sequence", route("name: writes", "path: /w", "resource: w", "sequence: always"),
			[]string{`route "writes": sequence: "always" must be off, required or optional`}},
		{"sequence in upper case", route("name: writes", "path: /w", "resource: w", "sequence: Required"),
			[]string{`route "writes": sequence: "Required" must be off, required or optional`}},
		{"sequence not a string", route("name: writes", "path: /w", "resource: w", "sequence: [required]"),
			[]string{"route \"writes\": line 8: cannot use !!seq here: want a string"}},
		{"fence false with sequence", route("name: writes", "path: /w", "fence: false", "sequence: required"),
			[]string{`route "writes": fence: false contradicts sequence (an unfenced rule has none)`}},
		{"fence false with sequence off", route("name: writes", "path: /w", "fence: false", "sequence: off"),
			[]string{`route "writes": fence: false contradicts sequence`}},
		{"fence false with sequence and token", route("name: writes", "path: /w", "fence: false", "token: optional", "sequence: optional"),
			[]string{`route "writes": fence: false contradicts token, sequence`}},
		{"fence false with drain", route("name: writes", "path: /w", "fence: false", "drain: false"),
			[]string{`route "writes": fence: false contradicts drain`}},
		{"fence false with enforce", route("name: writes", "path: /w", "fence: false", "enforce: false"),
			[]string{`route "writes": fence: false contradicts enforce`}},
		{"enforce not a boolean", route("name: writes", "path: /w", "resource: w", "enforce: later"),
			[]string{`route "writes"`}},
		{"drain not a boolean", route("name: writes", "path: /w", "resource: w", "drain: sometimes"),
			[]string{`route "writes"`}},
		{"compare > with sequence required", route("name: writes", "path: /w", "resource: w", `compare: ">"`, "sequence: required"),
			[]string{`route "writes": compare: ">" contradicts sequence: required`}},
		{"default bad sequence", "default:\n  sequence: sometimes\n", []string{`default: sequence: "sometimes" must be off, required or optional`}},
		{"default fence false with sequence", "default:\n  fence: false\n  sequence: optional\n", []string{"default: fence: false contradicts sequence"}},
		{"default compare > with sequence required", "default:\n  compare: '>'\n  sequence: required\n", []string{`default: compare: ">" contradicts sequence: required`}},
		// With optional, a token already used would be admitted again by
		// adding a sequence to it.
		{"compare > with sequence optional", route("name: writes", "path: /w", "resource: w", `compare: ">"`, "sequence: optional"),
			[]string{`route "writes": compare: ">" contradicts sequence: optional`}},
		{"compare > with sequence optional, token optional", route("name: writes", "path: /w", "resource: w", `compare: ">"`, "sequence: optional", "token: optional"),
			[]string{`route "writes": compare: ">" contradicts sequence: optional`}},
		{"default compare > with sequence optional", "default:\n  compare: '>'\n  sequence: optional\n", []string{`default: compare: ">" contradicts sequence: optional`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRoutes([]byte(tt.file))
			requireProblems(t, err, tt.want...)
			if lines := problemLines(t, err); len(lines) != len(tt.want) {
				t.Errorf("want %d problems, got %d:\n%v", len(tt.want), len(lines), err)
			}
		})
	}
}

// The drain key: the barrier is on unless a fenced rule says drain: false.
func TestParseRoutesDrain(t *testing.T) {
	rs, err := ParseRoutes([]byte(`
routes:
  - {name: plain, path: /plain, resource: plain}
  - {name: on, path: /on, resource: on, drain: true}
  - {name: out, path: /out, resource: out, drain: false}
default:
  drain: false
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true} {
		if got := rs.Routes[i].NoDrain; got != want {
			t.Errorf("route %s: NoDrain = %v, want %v", rs.Routes[i].Name, got, want)
		}
	}
	if !rs.Default.NoDrain {
		t.Error("default rule: drain: false not read")
	}
}

// The enforce key: on unless a fenced rule says enforce: false (dry run).
func TestParseRoutesEnforce(t *testing.T) {
	rs, err := ParseRoutes([]byte(`
routes:
  - {name: plain, path: /plain, resource: plain}
  - {name: on, path: /on, resource: on, enforce: true}
  - {name: dry, path: /dry, resource: dry, enforce: false}
default:
  enforce: false
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, true} {
		if got := rs.Routes[i].DryRun; got != want {
			t.Errorf("route %s: DryRun = %v, want %v", rs.Routes[i].Name, got, want)
		}
	}
	if !rs.Default.DryRun {
		t.Error("default rule: enforce: false not read")
	}
}

// ReadRoutes is what a reload runs: every problem, each naming the file.
func TestReadRoutes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("routes:\n  - {name: w, path: '/w/{id}', resource: 'w/{id}'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := ReadRoutes(good, "Fencing-Token", "Fencing-Sequence")
	if err != nil || len(rs.Routes) != 1 || rs.Routes[0].Name != "w" {
		t.Fatalf("ReadRoutes(good) = %+v, %v", rs, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("routes:\n  - {name: w, path: /w, resource: '{header:Fencing-Token}'}\n  - {name: x, path: /x, colour: red}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadRoutes(bad, "Fencing-Token", "Fencing-Sequence")
	requireProblems(t, err, `FENCE_ROUTES_FILE "`+bad+`": route "x"`, `FENCE_ROUTES_FILE "`+bad+`": route "w"`)
	if _, err := ReadRoutes(filepath.Join(dir, "absent.yaml"), "Fencing-Token", ""); err == nil || !strings.Contains(err.Error(), "FENCE_ROUTES_FILE") {
		t.Errorf("absent file: %v", err)
	}
}

// The sequence key: off by default, on any fenced rule (the default rule
// too), and "off" is a string here, not YAML 1.1's false.
func TestParseRoutesSequence(t *testing.T) {
	rs, err := ParseRoutes([]byte(`
routes:
  - {name: none, path: /none, resource: none}
  - {name: off, path: /off, resource: off, sequence: off}
  - {name: req, path: /req, resource: req, sequence: required}
  - {name: req-ge, path: /req-ge, resource: req-ge, sequence: required, compare: ">="}
  - {name: opt, path: /opt, resource: opt, sequence: optional}
  - {name: opt-topt, path: /opt-topt, resource: opt-topt, sequence: optional, token: optional}
  - {name: off-gt, path: /off-gt, resource: off-gt, sequence: off, compare: ">"}
  - {name: unfenced, path: /unfenced, fence: false}
default:
  sequence: required
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Sequence{
		"none": SequenceOff, "off": SequenceOff, "req": SequenceRequired, "req-ge": SequenceRequired,
		"opt": SequenceOptional, "opt-topt": SequenceOptional, "off-gt": SequenceOff, "unfenced": SequenceOff,
	}
	for _, r := range rs.Routes {
		if r.Sequence != want[r.Name] {
			t.Errorf("route %q: sequence %v, want %v", r.Name, r.Sequence, want[r.Name])
		}
	}
	if opt := rs.Routes[5]; opt.Compare != CompareAtLeast || !opt.TokenOptional {
		t.Errorf("route opt-topt: %+v", opt)
	}
	if gt := rs.Routes[6]; gt.Compare != CompareGreater {
		t.Errorf("route off-gt: %+v", gt)
	}
	d := rs.Default
	if d.Sequence != SequenceRequired || !d.Fence || d.Resource.Raw != "default" || d.Compare != CompareAtLeast {
		t.Errorf("default rule %+v", d)
	}
	if DefaultRoutes().Default.Sequence != SequenceOff {
		t.Error("the built-in default rule orders by sequence")
	}
	for s, spelling := range map[Sequence]string{SequenceOff: "off", SequenceRequired: "required", SequenceOptional: "optional", 9: "Sequence(9)"} {
		if got := s.String(); got != spelling {
			t.Errorf("Sequence(%d).String() = %q, want %q", uint8(s), got, spelling)
		}
	}
}

func TestParseRoutesReportsEveryProblem(t *testing.T) {
	const file = `
routes:
  - name: a
    path: /a/{id}
    resource: a/{ID}
    compare: "=="
    token: maybe
  - path: /b
    resource: b
    colour: blue
  - name: c
    path: /c//d
    fence: false
    compare: ">"
  - name: a
    path: /a/{x}
    methods: [put]
    resource: a
default:
  resource: "{query:}"
`
	_, err := ParseRoutes([]byte(file))
	wants := []string{
		`route "a": resource: "a/{ID}": {ID} is not a parameter of the path (it has id)`,
		`route "a": compare: "==" must be`,
		`route "a": token: "maybe" must be`,
		`routes[1]: line 10: unknown key "colour"`,
		`route "c": path: "/c//d": empty segment never matches`,
		`route "c": fence: false contradicts compare`,
		`route "a": name: duplicate (routes[0] and routes[3])`,
		`route "a": path: PUT /a/{x} has the same method and pattern as route "a" (/a/{id})`,
		`default: resource: "{query:}": {query:}: empty query parameter name`,
	}
	requireProblems(t, err, wants...)
	if lines := problemLines(t, err); len(lines) != len(wants) {
		t.Errorf("want %d problems, got %d:\n%v", len(wants), len(lines), err)
	}
}

// Spellings that frameworks read as the same request must be expressible in
// the routes file: any method token, numeric ids, case-insensitive paths.
func TestParseRoutesSpellings(t *testing.T) {
	rs, err := ParseRoutes([]byte(`
case: insensitive
routes:
  - name: dav
    path: /Files/{name}
    methods: [MKCOL, move, COPY, PROPPATCH, LOCK, MERGE]
    resource: files/{name}
  - name: orders
    path: /orders/{id:uint}/Items/{item:[A-Z]+}
    case: sensitive
    resource: orders/{id}/{item}
`))
	if err != nil {
		t.Fatal(err)
	}
	dav, orders := rs.Routes[0], rs.Routes[1]
	if want := []string{"MKCOL", "MOVE", "COPY", "PROPPATCH", "LOCK", "MERGE"}; !reflect.DeepEqual(dav.Methods, want) {
		t.Errorf("methods %q, want %q", dav.Methods, want)
	}
	if !dav.CaseInsensitive || dav.Pattern != "/files/{name}" {
		t.Errorf("dav: insensitive %v pattern %q, want the file's default and a folded pattern", dav.CaseInsensitive, dav.Pattern)
	}
	if orders.CaseInsensitive || orders.Pattern != "/orders/{id}/Items/{item:[A-Z]+}" || !reflect.DeepEqual(orders.UintParams, []string{"id"}) {
		t.Errorf("orders: insensitive %v pattern %q uints %q", orders.CaseInsensitive, orders.Pattern, orders.UintParams)
	}
}

func TestParseRoutesCaseClashes(t *testing.T) {
	_, err := ParseRoutes([]byte(`
routes:
  - {name: a, path: "/Orders/{id}", case: insensitive, resource: a}
  - {name: b, path: "/orders/{x}", case: insensitive, resource: b}
  - {name: c, path: "/orders/{x}", case: sensitive, resource: c}
`))
	requireProblems(t, err, `route "b": path: POST, PUT, PATCH, DELETE /orders/{x} has the same method and pattern as route "a"`)
	if n := len(problemLines(t, err)); n != 1 {
		t.Errorf("%d problems, want only b's (c is case-sensitive: a table of its own): %v", n, err)
	}
	_, err = ParseRoutes([]byte("case: upper\nroutes: [{name: a, path: /a, resource: a}]\n"))
	requireProblems(t, err, `case: "upper" must be sensitive or insensitive`)
}

func TestFoldPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/orders/7", "/orders/7"},
		{"/ORDERS/Ab", "/orders/ab"},
		{"/\u212a", "/k"},                              // Kelvin sign folds with K and k
		{"/\u017f", "/s"},                              // long s folds with S and s
		{"/\u00e9", "/\u00c9"},                         // é and É share one representative
		{"/\u00c9", "/\u00c9"},                         //
		{"/a\xffB", "/a\xffb"},                         // bytes that are not UTF-8 are kept
		{"/\u03a3\u03c3\u03c2", "/\u03a3\u03a3\u03a3"}, // all three sigmas
	} {
		if got := FoldPath(tc.in); got != tc.want {
			t.Errorf("FoldPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := FoldPath(FoldPath(tc.in)); got != FoldPath(tc.in) {
			t.Errorf("FoldPath is not idempotent on %q", tc.in)
		}
	}
}
