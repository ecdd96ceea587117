package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var injectIn = filepath.Join("..", "..", "internal", "inject", "testdata", "in")

// TestInjectCommand runs `fenceproxy inject` through run, as main does: from
// files and from stdin, and its mistakes.
func TestInjectCommand(t *testing.T) {
	numeric, err := os.ReadFile(filepath.Join(injectIn, "numeric-port.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join(injectIn, "..", "out", "numeric-port.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	store := "--redis-url=redis://redis-0.redis.fenceproxy.svc:6379/0"
	cases := []struct {
		name     string
		args     []string
		stdin    string
		want     string // in stdout
		wantErr  string
		exitCode int
	}{
		{"a file", []string{"--image=fenceproxy:v0.0.1", store, filepath.Join(injectIn, "numeric-port.yaml")}, "", string(golden), "", 0},
		{"stdin", []string{"--image=fenceproxy:v0.0.1", store}, string(numeric), string(golden), "", 0},
		{"stdin as -", []string{"--image=fenceproxy:v0.0.1", store, "-"}, string(numeric), string(golden), "", 0},
		{"two files", []string{store, filepath.Join(injectIn, "numeric-port.yaml"), filepath.Join(injectIn, "statefulset.yaml")}, "", "name: ledger-fenceproxy", "", 0},
		{"help", []string{"-h"}, "", "usage: fenceproxy inject", "", 0},
		{"no store", nil, string(numeric), "", "no store: give --redis-url", 2},
		{"bad app port", []string{store, "--app-port=orders="}, "", "", "want [WORKLOAD=]PORT", 2},
		{"refused", []string{store, "--app-port=orders=http"}, string(numeric), "", "inject: nothing written:\nDeployment/shop/orders: --app-port http is no container port of the pod (have orders/8080)", 1},
		{"missing file", []string{store, "nope.yaml"}, "", "", "nope.yaml", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := injectCmd(tc.args, strings.NewReader(tc.stdin), &stdout)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			case err != nil && exitCode(err) != tc.exitCode:
				t.Errorf("exit code %d, want %d", exitCode(err), tc.exitCode)
			}
			if tc.want != "" && !strings.Contains(stdout.String(), tc.want) {
				t.Errorf("stdout lacks %q:\n%s", tc.want, stdout.String())
			}
			if err != nil && stdout.Len() > 0 {
				t.Errorf("an error, yet output: %s", stdout.String())
			}
		})
	}
}

// TestDefaultImage: a release build injects its own image tag.
func TestDefaultImage(t *testing.T) {
	defer func(v string) { version = v }(version)
	for v, want := range map[string]string{"v1.2.3": "fenceproxy:v1.2.3", "v1.2.3-rc.1": "fenceproxy:v1.2.3-rc.1", "(devel)": "fenceproxy:dev", "": "fenceproxy:dev"} {
		version = v
		if v == "" {
			continue // buildVersion falls back to the build info, not set in tests
		}
		if got := defaultImage(); got != want {
			t.Errorf("version %q: image %q, want %q", v, got, want)
		}
	}
}
