package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// defaultMethods are the methods a route or the default rule fences when its
// methods key is absent.
var defaultMethods = []string{"POST", "PUT", "PATCH", "DELETE"}

// DefaultRoutes returns the route table used without a routes file: no
// routes, and a default rule fencing POST, PUT, PATCH and DELETE against the
// single resource "default" with compare ">=" and a required token.
func DefaultRoutes() Routes {
	return Routes{Default: Route{
		Name:     "default",
		Methods:  slices.Clone(defaultMethods),
		Fence:    true,
		Resource: Template{Raw: "default", Parts: []Part{{Kind: PartLiteral, Value: "default"}}},
		Compare:  CompareAtLeast,
	}}
}

// rawFile is the routes file as written.
type rawFile struct {
	Routes  []rawRoute `yaml:"routes"`
	Default *rawRule   `yaml:"default"`
	Case    *string    `yaml:"case"` // the routes' default for their own case key
}

// rawRoute is one entry of the routes file as written.
type rawRoute struct {
	Name    string  `yaml:"name"`
	Path    string  `yaml:"path"`
	Case    *string `yaml:"case"` // sensitive | insensitive
	rawRule `yaml:",inline"`
}

// rawRule holds the keys a route shares with the default rule. Pointers and
// a nil slice tell an absent key from an empty one.
type rawRule struct {
	Methods  []string `yaml:"methods"`
	Resource *string  `yaml:"resource"`
	Compare  *string  `yaml:"compare"`
	Token    *string  `yaml:"token"`
	Sequence *string  `yaml:"sequence"` // off | required | optional
	Drain    *bool    `yaml:"drain"`
	Fence    *bool    `yaml:"fence"`
	Enforce  *bool    `yaml:"enforce"` // false: dry run
}

// ParseRoutes parses and validates a routes file (docs/routes.md describes its
// schema). Unknown keys, values of the wrong type and every invalid or
// contradictory setting are errors; all of them are returned at once, one per
// line, each naming the route (by name, or as routes[i] when it has none) or
// the default rule, and the key or the line at fault.
func ParseRoutes(data []byte) (Routes, error) {
	rs, problems := parseRoutes(data)
	if len(problems) > 0 {
		return Routes{}, errors.Join(problems...)
	}
	return rs, nil
}

// parseRoutes is ParseRoutes returning the problems one by one.
func parseRoutes(data []byte) (Routes, []error) {
	// Pass 1: the document as a node tree, for syntax errors and to tell
	// which route a line of the file belongs to.
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return Routes{}, []error{err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return Routes{}, []error{errors.New("more than one YAML document")}
	}

	// Pass 2: strict decoding. yaml collects every unknown key and every
	// value of the wrong type, and decodes what it can.
	var raw rawFile
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var problems []error
	broken := map[int]bool{} // routes (-1: the default rule) with decoding errors
	topBroken := false
	if err := strict.Decode(&raw); err != nil && err != io.EOF {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return Routes{}, []error{err}
		}
		lines := ruleLinesOf(&doc)
		for _, msg := range te.Errors {
			line, msg := rewriteYAMLError(msg)
			idx, ok := lines.at(line)
			switch {
			case !ok:
				topBroken = true
				problems = append(problems, errors.New(msg))
			case idx < 0:
				broken[idx] = true
				problems = append(problems, fmt.Errorf("default: %s", msg))
			default:
				broken[idx] = true
				problems = append(problems, fmt.Errorf("%s: %s", routeLabel(idx, lines.names[idx]), msg))
			}
		}
	}

	// Pass 3: the meaning of what was decoded.
	var rs Routes
	// Insensitive unless told otherwise: folding too much only makes two
	// spellings share a mark (a refusal someone sees), folding too little lets
	// one escape the other's fence (a stale write nobody sees).
	defaultInsensitive := true
	if raw.Case != nil {
		insensitive, err := parseCase(*raw.Case)
		if err != nil {
			problems = append(problems, err)
		}
		defaultInsensitive = insensitive
	}
	names := map[string]int{}    // route name -> index of its first use
	patterns := map[string]int{} // method + " " + pattern key -> route index
	for i, r := range raw.Routes {
		if broken[i] {
			continue
		}
		label := routeLabel(i, r.Name)
		bad := func(format string, args ...any) {
			problems = append(problems, errors.New(label+": "+fmt.Sprintf(format, args...)))
		}
		switch {
		case r.Name == "":
			bad("name: required")
		case !validRouteName(r.Name):
			bad("name: must match [A-Za-z0-9_.-]+ (it is a metrics label)")
		case r.Name == "default":
			bad("name: \"default\" is reserved for the default rule")
		default:
			if j, dup := names[r.Name]; dup {
				bad("name: duplicate (routes[%d] and routes[%d])", j, i)
			} else {
				names[r.Name] = i
			}
		}
		var pat *pattern
		if r.Path == "" {
			bad("path: required")
		} else if p, err := parsePattern(r.Path); err != nil {
			bad("path: %v", err)
		} else {
			pat = &p
		}
		route := buildRule(Route{Name: r.Name, Path: r.Path}, r.rawRule, ruleScope{path: pat}, bad)
		route.CaseInsensitive = defaultInsensitive
		if r.Case != nil {
			insensitive, err := parseCase(*r.Case)
			if err != nil {
				bad("%v", err)
			}
			route.CaseInsensitive = insensitive
		}
		if pat != nil {
			route.Pattern, route.UintParams = pat.chi, pat.uints
			key := pat.key
			if route.CaseInsensitive {
				// Matched on the folded path, in a table of its own: it
				// clashes with routes whose folded patterns are the same.
				route.Pattern = foldPattern(pat.chi)
				key = "insensitive " + foldPattern(pat.key)
			}
			clash := map[int][]string{} // earlier route -> the methods it shares
			var clashOrder []int
			for _, m := range route.Methods {
				k := m + " " + key
				j, dup := patterns[k]
				if !dup {
					patterns[k] = i
					continue
				}
				if clash[j] == nil {
					clashOrder = append(clashOrder, j)
				}
				clash[j] = append(clash[j], m)
			}
			for _, j := range clashOrder {
				bad("path: %s %s has the same method and pattern as %s (%s); parameter names do not count",
					strings.Join(clash[j], ", "), r.Path, routeLabel(j, raw.Routes[j].Name), raw.Routes[j].Path)
			}
		}
		rs.Routes = append(rs.Routes, route)
	}

	switch {
	case broken[-1]:
	case raw.Default == nil:
		rs.Default = DefaultRoutes().Default
	default:
		bad := func(format string, args ...any) {
			problems = append(problems, errors.New("default: "+fmt.Sprintf(format, args...)))
		}
		rs.Default = buildRule(Route{Name: "default"}, *raw.Default, ruleScope{isDefault: true}, bad)
	}
	if len(raw.Routes) == 0 && raw.Default == nil && !topBroken && !broken[-1] {
		problems = append(problems, errors.New("no routes: give at least one route, or a default rule"))
	}
	return rs, problems
}

// ruleScope is what a rule's resource template may refer to.
type ruleScope struct {
	isDefault bool     // the default rule, which has no path
	path      *pattern // the route's path; nil if it is invalid (or for the default rule)
}

// buildRule fills r from the keys a route shares with the default rule and
// reports each problem among them to bad.
func buildRule(r Route, raw rawRule, scope ruleScope, bad func(format string, args ...any)) Route {
	r.Methods = slices.Clone(defaultMethods)
	if raw.Methods != nil {
		r.Methods = nil
		if len(raw.Methods) == 0 {
			bad("methods: empty (omit the key for POST, PUT, PATCH, DELETE)")
		}
		for _, m := range raw.Methods {
			// Any method token may be fenced (MERGE, WebDAV's MKCOL, MOVE,
			// COPY, PROPPATCH, LOCK, ...). Methods are case-sensitive on the
			// wire; the file's spelling is upper-cased, and the proxy refuses
			// a request whose method is fenced only once upper-cased.
			up := strings.ToUpper(m)
			switch {
			case !validHeaderName(m):
				bad("methods: %q is not an HTTP method (a token such as PUT or MKCOL)", m)
			case slices.Contains(r.Methods, up):
				bad("methods: %s listed twice", up)
			default:
				r.Methods = append(r.Methods, up)
			}
		}
	}

	r.Fence = raw.Fence == nil || *raw.Fence
	if !r.Fence {
		var set []string
		if raw.Resource != nil {
			set = append(set, "resource")
		}
		if raw.Compare != nil {
			set = append(set, "compare")
		}
		if raw.Token != nil {
			set = append(set, "token")
		}
		if raw.Sequence != nil {
			set = append(set, "sequence")
		}
		if raw.Drain != nil {
			set = append(set, "drain")
		}
		if raw.Enforce != nil {
			set = append(set, "enforce")
		}
		if len(set) > 0 {
			bad("fence: false contradicts %s (an unfenced rule has none)", strings.Join(set, ", "))
		}
		return r
	}

	switch {
	case raw.Resource == nil && scope.isDefault:
		r.Resource = DefaultRoutes().Default.Resource
	case raw.Resource == nil:
		bad("resource: required for a fenced route (or set fence: false)")
	case *raw.Resource == "":
		bad("resource: empty template")
	case scope.isDefault:
		t, err := ParseTemplate(*raw.Resource, nil, false)
		switch {
		case errors.Is(err, errNotParam):
			bad("resource: %v; the default rule has no path, so only {header:Name} and {query:name} placeholders", err)
		case err != nil:
			bad("resource: %v", err)
		}
		r.Resource = t
	case scope.path != nil:
		t, err := ParseTemplate(*raw.Resource, scope.path.params, scope.path.wildcard)
		if err != nil {
			bad("resource: %v", err)
		}
		r.Resource = t
	}

	r.Compare = CompareAtLeast
	if raw.Compare != nil {
		switch c := Compare(*raw.Compare); c {
		case CompareAtLeast, CompareGreater:
			r.Compare = c
		default:
			bad("compare: %q must be \">=\" or \">\"", *raw.Compare)
		}
	}

	if raw.Token != nil {
		switch *raw.Token {
		case "required":
		case "optional":
			r.TokenOptional = true
		default:
			bad("token: %q must be required or optional", *raw.Token)
		}
	}

	if raw.Sequence != nil {
		switch *raw.Sequence {
		case "off":
		case "required":
			r.Sequence = SequenceRequired
		case "optional":
			r.Sequence = SequenceOptional
		default:
			bad("sequence: %q must be off, required or optional", *raw.Sequence)
		}
	}
	r.NoDrain = raw.Drain != nil && !*raw.Drain
	r.DryRun = raw.Enforce != nil && !*raw.Enforce
	// compare applies only to a request without a sequence. With sequence:
	// required there is none, and with optional a request escapes it by
	// carrying one: a token already used, sent again with a sequence, is
	// admitted by its pair. Either way one token admits many requests,
	// which is not what ">" (each request its own token) promises.
	if r.Sequence != SequenceOff && r.Compare == CompareGreater {
		bad("compare: \">\" contradicts sequence: %s (a request with a sequence is ordered by its (token, sequence) pair, "+
			"so one token admits many requests, a token already used included; drop compare, or set sequence: off for one request per token)", r.Sequence)
	}
	return r
}

// parseCase reads a case key: whether paths match without regard to case.
func parseCase(v string) (insensitive bool, err error) {
	switch v {
	case "sensitive":
		return false, nil
	case "insensitive":
		return true, nil
	}
	return false, fmt.Errorf("case: %q must be sensitive or insensitive", v)
}

// routeLabel names route i in an error message.
func routeLabel(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("routes[%d]", i)
	}
	return fmt.Sprintf("route %q", name)
}

var routeNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// validRouteName reports whether s can be a route name (a metrics label).
func validRouteName(s string) bool { return routeNameRE.MatchString(s) }

// ruleLines maps lines of the routes file to the rule they belong to.
type ruleLines struct {
	first, last []int    // per rule; index 0 is the default rule, i+1 route i
	names       []string // per route, its name key if it is a string
}

// ruleLinesOf returns the line ranges of the default rule and of each route in
// doc (a document node).
func ruleLinesOf(doc *yaml.Node) ruleLines {
	s := ruleLines{first: []int{-1}, last: []int{-1}}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return s
	}
	top := doc.Content[0].Content
	for k := 0; k+1 < len(top); k += 2 {
		key, val := top[k], top[k+1]
		switch key.Value {
		case "default":
			s.first[0], s.last[0] = key.Line, lastLine(val)
		case "routes":
			if val.Kind != yaml.SequenceNode {
				continue
			}
			for _, r := range val.Content {
				s.first = append(s.first, r.Line)
				s.last = append(s.last, lastLine(r))
				s.names = append(s.names, nameOf(r))
			}
		}
	}
	return s
}

// nameOf returns the value of the name key of a route node, or "".
func nameOf(route *yaml.Node) string {
	if route.Kind != yaml.MappingNode {
		return ""
	}
	for k := 0; k+1 < len(route.Content); k += 2 {
		if key, val := route.Content[k], route.Content[k+1]; key.Value == "name" && val.Kind == yaml.ScalarNode {
			return val.Value
		}
	}
	return ""
}

// at returns the rule holding line (-1 for the default rule, i for route
// i); ok is false when no single rule holds it.
func (s ruleLines) at(line int) (rule int, ok bool) {
	found := 0
	for i := range s.first {
		if s.first[i] >= 0 && s.first[i] <= line && line <= s.last[i] {
			rule = i - 1
			found++
		}
	}
	return rule, found == 1
}

// lastLine returns the last line n spans.
func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}

var (
	yamlLineRE    = regexp.MustCompile(`^line (\d+): `)
	yamlUnknownRE = regexp.MustCompile(`^field (.*) not found in type \S+$`)
	yamlTwiceRE   = regexp.MustCompile(`^field (.*) already set in type \S+$`)
	yamlDupKeyRE  = regexp.MustCompile(`^mapping key (".*") already defined at (line \d+)$`)
	yamlTypeRE    = regexp.MustCompile(`^cannot unmarshal (.*) into (\S+)$`)
)

// yamlTypes names the Go types of rawFile for people.
var yamlTypes = map[string]string{
	"config.rawFile":    "a mapping with keys routes and default",
	"[]config.rawRoute": "a list of routes",
	"config.rawRoute":   "a route (a mapping)",
	"config.rawRule":    "a mapping",
	"[]string":          "a list of methods",
	"string":            "a string",
	"bool":              "true or false",
}

// rewriteYAMLError turns one of yaml's type errors into the words of the
// routes file and returns the line it names (0 if none).
func rewriteYAMLError(msg string) (line int, out string) {
	msg = strings.ReplaceAll(msg, "\n", `\n`)
	prefix := ""
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		prefix = m[0]
	}
	rest := msg[len(prefix):]
	if m := yamlUnknownRE.FindStringSubmatch(rest); m != nil {
		return line, prefix + fmt.Sprintf("unknown key %q", m[1])
	}
	if m := yamlTwiceRE.FindStringSubmatch(rest); m != nil {
		return line, prefix + fmt.Sprintf("key %q given twice", m[1])
	}
	if m := yamlDupKeyRE.FindStringSubmatch(rest); m != nil {
		return line, prefix + fmt.Sprintf("key %s given twice (first at %s)", m[1], m[2])
	}
	if m := yamlTypeRE.FindStringSubmatch(rest); m != nil {
		want, ok := yamlTypes[strings.TrimPrefix(m[2], "*")]
		if !ok {
			want = m[2]
		}
		return line, prefix + fmt.Sprintf("cannot use %s here: want %s", m[1], want)
	}
	return line, msg
}
