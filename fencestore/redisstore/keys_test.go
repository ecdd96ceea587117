package redisstore

import (
	"strings"
	"testing"
)

// validPrefix is FENCE_KEY_PREFIX's rule (config.checkKeyPrefix): not
// empty, and not beginning with '{', which every key that is not a mark
// does.
func validPrefix(p string) bool { return p != "" && p[0] != '{' }

// otherKeys is every key the store keeps for something else than the mark
// of a resource, for a store with prefix whose marks include mark: the
// identity record, the generation (single server, and a Cluster slot's),
// a Cluster slot's identity record, and the in-flight key of mark.
func otherKeys(t testing.TB, prefix, mark string) map[string]string {
	keys := map[string]string{
		"identity":        prefix,
		"generation":      besideKey(prefix, generationSuffix),
		"in-flight (new)": must(flightKey(mark)),
	}
	if !strings.Contains(prefix, "}") {
		r, err := newSlotRecords(prefix)
		if err != nil {
			t.Fatal(err)
		}
		slot := keySlot(mark)
		keys["cluster identity"] = r.name(slot)
		keys["cluster generation"] = r.generation(slot)
	}
	return keys
}

func must(k string, _ bool) string { return k }

// Every key kind, under prefixes FENCE_KEY_PREFIX accepts: no resource
// name spells one (the identity record is the prefix itself, and no
// resource name is empty; every other key begins with '{'). Under the
// prefixes it refuses, one does: the in-flight key of orders/42 under
// {fence}: is the mark key of the resource inflight:{fence}:orders/42, as
// with the older layout the in-flight key of a mark with a hash tag was the
// mark key of <resource>:inflight.
func TestKeyKinds(t *testing.T) {
	resources := []string{"orders/42", "orders/{42}", "{x}", "a}b", "a{}b", "orders/42:inflight", "x:generation"}
	for _, prefix := range []string{"fence:", "app1:fence:", "fence{t}:", "f", "fence:{x}:", "}"} {
		for _, r := range resources {
			for kind, k := range otherKeys(t, prefix, prefix+r) {
				if k == prefix {
					continue // the identity record: only the empty name, refused everywhere
				}
				if name, ok := strings.CutPrefix(k, prefix); ok {
					t.Errorf("prefix %q: the %s key of %q is %q, the mark key of resource %q", prefix, kind, r, k, name)
				}
			}
		}
	}
	for _, tc := range []struct{ prefix, resource, kind, spelled string }{
		{"{fence}:", "orders/42", "in-flight (new)", "inflight:{fence}:orders/42"},
		{"{", "x", "generation", "{}:generation"},
	} {
		if validPrefix(tc.prefix) {
			t.Fatalf("%q is a valid prefix", tc.prefix)
		}
		if k := otherKeys(t, tc.prefix, tc.prefix+tc.resource)[tc.kind]; k != tc.prefix+tc.spelled {
			t.Errorf("under %q the %s key of %q is %q, not the mark key of %q: the reason the prefix is refused is gone",
				tc.prefix, tc.kind, tc.resource, k, tc.spelled)
		}
	}
}

// For any valid prefix and any two resource names: no key kept for r1
// is r2's mark key, and two resources never share an in-flight key.
func FuzzKeyKinds(f *testing.F) {
	for _, s := range [][3]string{
		{"fence:", "orders/42", "orders/42:inflight"},
		{"fence:", "orders/{42}", "orders/{42}:inflight"},
		{"f", "{fa}:inflight", "a}:inflight:f{fa"},
		{"fence{t}:", "x", "y"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, prefix, r1, r2 string) {
		if !validPrefix(prefix) || r1 == "" || r2 == "" || len(prefix) > 64 {
			t.Skip()
		}
		for kind, k := range otherKeys(t, prefix, prefix+r1) {
			if k != prefix && k == prefix+r2 {
				t.Fatalf("prefix %q: the %s key of %q is the mark key of %q", prefix, kind, r1, r2)
			}
		}
		if r1 != r2 && must(flightKey(prefix+r1)) == must(flightKey(prefix+r2)) {
			t.Fatalf("prefix %q: %q and %q share the in-flight key %q", prefix, r1, r2, must(flightKey(prefix+r1)))
		}
	})
}
