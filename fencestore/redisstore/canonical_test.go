package redisstore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// The scripts' Lua canonical (marks.lua), run by a real Redis, agrees with
// fencestore.ParseDecimal on every case of the shared table: one rule, two
// implementations, one table.
func TestLuaCanonical(t *testing.T) {
	c := redistest.Start(t).Client(t)
	script := redis.NewScript(marksLib + "\nif canonical(ARGV[1]) then return 1 end\nreturn 0\n")
	for _, tc := range storetest.DecimalCases() {
		got, err := script.Run(t.Context(), c, nil, tc.In).Int()
		if err != nil {
			t.Fatalf("canonical(%q): %v", tc.In, err)
		}
		if want := tc.Fault == fencestore.DecimalOK; (got == 1) != want {
			t.Errorf("Lua canonical(%q) = %v, want %v", tc.In, got == 1, want)
		}
	}
}
