package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// knownVariables are the FENCE_* variables Load reads, taken from rawEnv's
// tags so that the list cannot drift from what is parsed.
var knownVariables = func() []string {
	var names []string
	t := reflect.TypeFor[rawEnv]()
	for i := range t.NumField() {
		if name := t.Field(i).Tag.Get("env"); name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}()

// KnownVariables returns every FENCE_* variable the configuration reads,
// sorted.
func KnownVariables() []string { return slices.Clone(knownVariables) }

// Variable is one FENCE_* variable as `fenceproxy help` and the README's
// configuration table show it: taken from the same struct tags Load reads,
// so the three cannot drift apart.
type Variable struct {
	Name    string
	Default string // as shown: the value, or a phrase in parentheses
	Help    string // one line
}

// Variables returns every FENCE_* variable in the order of the
// configuration's definition (the most used first).
func Variables() []Variable {
	var out []Variable
	t := reflect.TypeFor[rawEnv]()
	for i := range t.NumField() {
		f := t.Field(i)
		v := Variable{Name: f.Tag.Get("env"), Help: f.Tag.Get("help"), Default: f.Tag.Get("shown")}
		if v.Default == "" {
			if d, ok := f.Tag.Lookup("envDefault"); ok {
				v.Default = d
			} else {
				v.Default = "(unset)"
			}
		}
		out = append(out, v)
	}
	return out
}

// serviceLinkRE matches the variables Kubernetes injects for a Service whose
// name starts with "fence" (service links: a Service "fence-redis" gives
// FENCE_REDIS_SERVICE_HOST, FENCE_REDIS_PORT_6379_TCP_ADDR, ...). They are
// not fenceproxy's, and refusing them would break a pod for a neighbour's
// name.
var serviceLinkRE = regexp.MustCompile(`^FENCE(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// checkUnknown reports every FENCE_* variable that is not one of fenceproxy's:
// a misspelled FENCE_REDIS_URL would otherwise silently run on the local
// bolt file, and with several replicas the guarantee would be gone.
func checkUnknown(environ map[string]string, bad func(variable, format string, args ...any)) {
	var unknown []string
	for k := range environ {
		if strings.HasPrefix(k, "FENCE_") && !slices.Contains(knownVariables, k) && !serviceLinkRE.MatchString(k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		if near := closestVariable(k); near != "" {
			bad(k, "unknown variable; did you mean %s?", near)
		} else {
			bad(k, "unknown variable (fenceproxy reads: %s)", strings.Join(knownVariables, ", "))
		}
	}
}

// closestVariable returns the known variable nearest to name by edit
// distance, or "" when none is near enough to be a likely misspelling.
func closestVariable(name string) string {
	best, bestDist := "", -1
	for _, k := range knownVariables {
		if d := editDistance(name, k); bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	// The shared "FENCE_" says nothing: judge the distance against the rest.
	if bestDist > max(2, (len(name)-len("FENCE_"))/2) {
		return ""
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment) between a and b: insertions, deletions, substitutions and
// transpositions of adjacent bytes each cost 1, so ULR is one edit from URL.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
