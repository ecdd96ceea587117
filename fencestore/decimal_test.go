package fencestore_test

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// ParseDecimal and ParseMark against the shared table.
func TestParseDecimal(t *testing.T) {
	cases := storetest.DecimalCases()
	if len(cases) < 20 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		v, f := fencestore.ParseDecimal(c.In)
		if f != c.Fault || (f == fencestore.DecimalOK && v != c.Want) {
			t.Errorf("ParseDecimal(%q) = %d, fault %d; want %d, fault %d", c.In, v, f, c.Want, c.Fault)
		}
		if v2, f2 := fencestore.ParseDecimal([]byte(c.In)); v2 != v || f2 != f {
			t.Errorf("ParseDecimal([]byte(%q)) differs from the string form", c.In)
		}
		if m, ok := fencestore.ParseMark(c.In); ok != (c.Fault == fencestore.DecimalOK) || m != v {
			t.Errorf("ParseMark(%q) = %d, %t", c.In, m, ok)
		}
	}
}

func TestParseDecimalAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		fencestore.ParseDecimal("18446744073709551615")
		fencestore.ParseDecimal([]byte("007"))
	}); n != 0 {
		t.Errorf("ParseDecimal allocates %v times", n)
	}
}
