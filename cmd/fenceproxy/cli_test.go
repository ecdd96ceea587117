package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --version is the version subcommand, as most tools spell it.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, nil, &out, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "fenceproxy ") {
			t.Fatalf("%v printed %q", args, out.String())
		}
	}
}

// demo -h prints the demo's flags and exits 0; an unknown flag is a usage
// error (exit 2).
func TestDemoHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-h"}, nil, &out, &errOut); err != nil {
		t.Fatalf("demo -h: %v", err)
	}
	for _, flag := range []string{"-once", "-listen", "-pause"} {
		if !strings.Contains(out.String(), flag) {
			t.Fatalf("demo -h does not list %s:\n%s", flag, out.String())
		}
	}
	err := run(context.Background(), []string{"demo", "-bogus"}, nil, &out, &errOut)
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "-bogus") {
		t.Fatalf("demo -bogus: %v (exit %d)", err, exitCode(err))
	}
}
