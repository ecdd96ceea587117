package main

import (
	"bytes"
	"context"
	"path/filepath"
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

// Every subcommand answers -h and --help with its usage and exit 0, serve
// and authz included (they take no arguments otherwise: exit 2).
func TestHelpOfEverySubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--help"}, "serve     run the proxy"},
		{[]string{"serve", "-h"}, "serve     run the proxy"},
		{[]string{"authz", "--help"}, "authz     answer fencing decisions"},
		{[]string{"version", "--help"}, "version   print the version"},
		{[]string{"marks", "--help"}, "fenceproxy marks reset RESOURCE"},
		{[]string{"marks", "reset", "--help"}, "fenceproxy marks reset RESOURCE"},
		{[]string{"store", "--help"}, "fenceproxy store init"},
		{[]string{"check", "--help"}, "--connect"},
		{[]string{"help"}, "FENCE_UPSTREAM_URL"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, nil, &out, &errOut)
		if err != nil || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: %v (exit %d), output %q; want exit 0 and %q", tc.args, err, exitCode(err), out.String(), tc.want)
		}
	}
	err := run(context.Background(), []string{"serve", "extra"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "takes no arguments") {
		t.Errorf("serve extra: %v (exit %d), want a usage error", err, exitCode(err))
	}
}

// Flags may come before, between or after the arguments, as the usage
// lines show them; after "--" everything is an argument.
func TestMarksFlagsAnywhere(t *testing.T) {
	env := map[string]string{"FENCE_BOLT_PATH": filepath.Join(t.TempDir(), "marks.db")}
	cmd := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, env, &out, &errOut)
		return out.String(), err
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"marks", "raise", "default", "41"}, "default (none) -> 41"},
		{[]string{"marks", "reset", "default", "--force"}, "default 41 -> (none)"},
		{[]string{"marks", "raise", "default", "7", "-o", "json"}, `"mark":"7"`},
		{[]string{"marks", "reset", "default", "--force", "3"}, "default 7 -> 3"},
		{[]string{"marks", "get", "-o", "json", "default"}, `"mark":"3"`},
		{[]string{"marks", "raise", "--", "-odd", "5"}, "-odd (none) -> 5"},
		{[]string{"marks", "reset", "--force", "--", "-odd"}, "-odd 5 -> (none)"},
	} {
		out, err := cmd(tc.args...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("%q: %v, output %q; want %q", tc.args, err, out, tc.want)
		}
	}
	if _, err := cmd("marks", "reset", "default", "1"); exitCode(err) != 2 || !strings.Contains(err.Error(), "--force") {
		t.Errorf("reset without --force: %v", err)
	}
	if _, err := cmd("marks", "get", "default", "--bogus"); exitCode(err) != 2 || !strings.Contains(err.Error(), "-bogus") {
		t.Errorf("an unknown flag after the arguments: %v", err)
	}
}
