package storetest

import (
	"bufio"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

//go:embed testdata/decimals.txt
var decimalsFile string

// DecimalCase is one case of the canonical decimal: an input, and the
// number it is or the rule it breaks (Fault DecimalOK: it is Want).
type DecimalCase struct {
	In    string
	Want  uint64
	Fault fencestore.DecimalFault
}

var decimalFaults = map[string]fencestore.DecimalFault{
	"empty": fencestore.DecimalEmpty, "not_digits": fencestore.DecimalNotDigits,
	"leading_zero": fencestore.DecimalLeadingZero, "too_long": fencestore.DecimalTooLong,
	"out_of_range": fencestore.DecimalOutOfRange,
}

// DecimalCases returns the one table of canonical decimal cases
// (testdata/decimals.txt) that every implementation of the rule is tested
// against: fencestore.ParseDecimal, the proxy's token and sequence headers,
// and the Redis scripts' Lua canonical. It panics on a malformed table (a
// test's own data).
func DecimalCases() []DecimalCase {
	var out []DecimalCase
	sc := bufio.NewScanner(strings.NewReader(decimalsFile))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		end := strings.LastIndexByte(text, '"')
		in, err := strconv.Unquote(text[:end+1])
		if err != nil {
			panic(fmt.Sprintf("decimals.txt:%d: %v", line, err))
		}
		c := DecimalCase{In: in}
		rest := strings.TrimSpace(text[end+1:])
		if f, ok := decimalFaults[rest]; ok {
			c.Fault = f
		} else if c.Want, err = strconv.ParseUint(rest, 10, 64); err != nil {
			panic(fmt.Sprintf("decimals.txt:%d: %q is neither a number nor a fault", line, rest))
		}
		out = append(out, c)
	}
	return out
}
