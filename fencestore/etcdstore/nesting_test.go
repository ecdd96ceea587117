package etcdstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// Two deployments whose prefixes nest on one etcd are refused (Nesting),
// whichever wrote its identity record first, marks or no marks, and a
// lost record counts as a record; prefixes that merely share a beginning
// are not.
func TestNestedPrefixes(t *testing.T) {
	c := etcdtest.Start(t)
	for i, tc := range []struct {
		name          string
		first, second string
		marks         bool // the first one holds marks
		lost          bool // and a lost record in place of its identity
		// busy: the first one also has a request in flight and an
		// operator's reset behind it (keys whose values are not marks).
		busy   bool
		nested bool
	}{
		{name: "inner after outer", first: "fence:", second: "fence:billing:", nested: true},
		{name: "one byte longer", first: "fence:", second: "fence:b", nested: true},
		{name: "inner after outer with marks", first: "fence:", second: "fence:billing:", marks: true, nested: true},
		{name: "inner after a lost outer", first: "fence:", second: "fence:billing:", lost: true, nested: true},
		{name: "outer after inner", first: "fence:billing:", second: "fence:", nested: true},
		{name: "outer after inner with marks", first: "fence:billing:", second: "fence:", marks: true, nested: true},
		{name: "outer after a lost inner", first: "fence:billing:", second: "fence:", marks: true, lost: true, nested: true},
		{name: "outer after a busy inner", first: "fence:billing:", second: "fence:", marks: true, busy: true, nested: true},
		{name: "siblings", first: "fence:", second: "fence2:"},
		{name: "a shorter sibling", first: "fence:", second: "fenc:"},
		{name: "a sibling beside marks", first: "fence:", second: "fenc:", marks: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case in a namespace of its own.
			ns := fmt.Sprintf("n%d/", i)
			first := open(t, c, ns+tc.first)
			t.Cleanup(func() { _ = first.Close() })
			id, err := first.Init(ctxT(t), false)
			if err != nil {
				t.Fatal(err)
			}
			if tc.marks {
				first.Expect(id)
				for r := range 3 {
					mustAdmit(t, first, fencestore.Admission{Resource: fmt.Sprintf("orders/%d", r), Token: 1 << 62})
				}
			}
			if tc.busy {
				d := mustAdmit(t, first, fencestore.Admission{Resource: "orders/9", Token: 1, Flight: time.Minute})
				t.Cleanup(func() { first.Release(d.Flight) })
				if _, _, err := first.Reset(ctxT(t), "orders/0", &fencestore.Mark{Token: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.lost {
				if _, err := first.MarkLost(ctxT(t), id); err != nil {
					t.Fatal(err)
				}
			}
			if err := first.Nesting(ctxT(t)); err != nil {
				t.Fatalf("first (%q) alone: %v", tc.first, err)
			}
			second := open(t, c, ns+tc.second)
			t.Cleanup(func() { _ = second.Close() })
			err = second.Nesting(ctxT(t))
			if got := errors.Is(err, etcdstore.ErrNestedPrefix); got != tc.nested {
				t.Fatalf("%q beside %q: %v, want nested %t", tc.second, tc.first, err, tc.nested)
			}
		})
	}
}
