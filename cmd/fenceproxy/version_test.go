package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// One version string: the VERSION file is a release tag (vMAJOR.MINOR.PATCH),
// `make version` (what `make build` stamps into the binary and `make image`
// tags the image with) prints it, CHANGELOG.md's newest entry is it, and
// the docs tell `go get` that tag; the binary built with the Makefile's
// ldflags prints it.
func TestOneVersionString(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	version := strings.TrimSpace(read("VERSION"))
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(version) {
		t.Fatalf("VERSION %q is not a release tag vMAJOR.MINOR.PATCH", version)
	}
	if _, err := exec.LookPath("make"); err == nil {
		cmd := exec.Command("make", "-s", "--no-print-directory", "version")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != version {
			t.Errorf("make version printed %q (%v), want %s", out, err, version)
		}
	}
	heading := regexp.MustCompile(`(?m)^## (v\S+)`).FindStringSubmatch(read("CHANGELOG.md"))
	if heading == nil || heading[1] != version {
		t.Errorf("CHANGELOG.md's newest entry is %v, want %s", heading, version)
	}
	for _, k := range []string{"deploy/examples/sample-app/kustomization.yaml", "deploy/integrations/authz/kustomization.yaml"} {
		if want := "newTag: " + version; !strings.Contains(read(k), want) {
			t.Errorf("%s's fenceproxy image is not tagged %s (%q)", k, version, want)
		}
	}
	for _, doc := range []string{"README.md", "docs/client.md"} {
		if want := "go get github.com/fenceproxy/fenceproxy/client@" + version; !strings.Contains(read(doc), want) {
			t.Errorf("%s does not say %q", doc, want)
		}
	}

	bin := filepath.Join(t.TempDir(), "fenceproxy")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil || strings.TrimSpace(string(out)) != "fenceproxy "+version {
			t.Errorf("fenceproxy %s printed %q (%v), want \"fenceproxy %s\"", args[0], out, err, version)
		}
	}
}
