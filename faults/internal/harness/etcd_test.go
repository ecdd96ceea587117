package harness

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

func TestParseEtcdMark(t *testing.T) {
	for v, want := range map[string]uint64{
		"00000000000000000042": 42,
		"00000000000000000000": 0,
		"00000000000000001089": 1089, // leading zeros are not octal
		"18446744073709551615": math.MaxUint64,
	} {
		if got, err := parseEtcdMark(v); err != nil || got != want {
			t.Errorf("parseEtcdMark(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "42", "0000000000000000004x", " 0000000000000000042", "+0000000000000000042",
		"18446744073709551616", "00000000000000000042:00000000000000000001"} {
		if got, err := parseEtcdMark(v); err == nil {
			t.Errorf("parseEtcdMark(%q) = %d, want an error", v, got)
		}
	}
}

// The reader's etcd read, on a real member: the marks of the keys asked
// for, 0 for a missing one, nothing from the identity record or the
// in-flight keys beside them, and an error for a value of another shape.
func TestEtcdMarks(t *testing.T) {
	c := etcdtest.Start(t)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for k, v := range map[string]string{
		"fence:":                 "identity",
		"fence:res/r0":           "00000000000000000042",
		"fence:res/r2":           "00000000000000000007",
		"fence:res/r20":          "00000000000000000999",
		"fence:\x00inflight/xyz": "",
	} {
		if _, err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"fence:res/r0", "fence:res/r1", "fence:res/r2"}
	marks, err := etcdMarks(ctx, cl, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 3 || marks[0] != 42 || marks[1] != 0 || marks[2] != 7 {
		t.Fatalf("marks = %v, want [42 0 7]", marks)
	}
	if _, err := cl.Put(ctx, "fence:res/r1", "42"); err != nil {
		t.Fatal(err)
	}
	if marks, err := etcdMarks(ctx, cl, keys); err == nil {
		t.Fatalf("a corrupt mark read as %v", marks)
	}
}
