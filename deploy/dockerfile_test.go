package deploy

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// repoRoot is the fenceproxy module, whose Dockerfile and Makefile these
// tests read.
const repoRoot = ".."

// checkDockerfile parses a Dockerfile with BuildKit's own parser and linter
// and returns what breaks what the image promises: multi-stage; the build
// stage runs `make build` (the target CI builds the binary with: CGO off,
// -trimpath, the version ldflag) on an official Go image of the module's Go
// version; the final stage is distroless static or scratch (no shell), runs
// as a numeric non-root USER, EXPOSEs fenceproxy's default ports and starts
// the copied binary with an exec-form ENTRYPOINT.
func checkDockerfile(data []byte, goVersion string, ports []string) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }

	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		return []string{"parse: " + err.Error()}
	}
	for _, w := range res.Warnings {
		bad("parser warning: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		bad("lint %s (line %d): %s", rule, line, msg)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return append(probs, "instructions: "+err.Error())
	}
	if len(stages) < 2 {
		return append(probs, fmt.Sprintf("%d stage(s): want a build stage and a minimal final stage", len(stages)))
	}

	// The build stage: the one that runs `make build`.
	makeBuild := regexp.MustCompile(`(^|[\s;&|])make\s+build(\s|$)`)
	build := -1
	for i, st := range stages[:len(stages)-1] {
		for _, cmd := range st.Commands {
			run, ok := cmd.(*instructions.RunCommand)
			if !ok {
				continue
			}
			line := strings.Join(run.CmdLine, " ")
			if !makeBuild.MatchString(line) {
				continue
			}
			build = i
			args := strings.Fields(line[makeBuild.FindStringIndex(line)[1]:])
			for _, a := range args {
				if k, _, ok := strings.Cut(a, "="); ok && k != "VERSION" {
					bad("make build overrides %s: the image must build exactly as CI does (only VERSION may be passed)", k)
				}
			}
			if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "VERSION=") }) {
				bad("make build is not passed VERSION=... (from a build ARG)")
			}
			for _, forbidden := range []string{"CGO_ENABLED=1", "GOFLAGS=", "LDFLAGS="} {
				if strings.Contains(line, forbidden) {
					bad("the build RUN sets %s", forbidden)
				}
			}
		}
	}
	if build < 0 {
		bad("no stage before the final one runs `make build`")
	} else {
		st := stages[build]
		if !strings.HasPrefix(st.BaseName, "golang:") && !strings.HasPrefix(st.BaseName, "docker.io/library/golang:") {
			bad("build stage FROM %s: want the official golang image", st.BaseName)
		} else if tag := st.BaseName[strings.LastIndex(st.BaseName, ":")+1:]; !strings.HasPrefix(tag, goVersion) {
			bad("build stage FROM %s: want Go %s (go.mod's go directive)", st.BaseName, goVersion)
		}
		hasVersionArg := false
		for _, cmd := range st.Commands {
			if a, ok := cmd.(*instructions.ArgCommand); ok {
				for _, kv := range a.Args {
					hasVersionArg = hasVersionArg || kv.Key == "VERSION"
				}
			}
		}
		if !hasVersionArg {
			bad("build stage has no ARG VERSION")
		}
	}

	final := stages[len(stages)-1]
	if final.BaseName != "scratch" && !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") {
		bad("final stage FROM %s: want gcr.io/distroless/static-* or scratch (no shell, no libc)", final.BaseName)
	}
	var entry *instructions.EntrypointCommand
	var users []string
	var exposed []string
	copied := ""
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.RunCommand:
			bad("final stage RUN %q: the final image has no shell", strings.Join(c.CmdLine, " "))
		case *instructions.UserCommand:
			users = append(users, c.User)
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.EntrypointCommand:
			entry = c
		case *instructions.CmdCommand:
			if c.PrependShell {
				bad("CMD in shell form: the final image has no shell")
			}
		case *instructions.CopyCommand:
			if build >= 0 && (c.From == stages[build].Name || c.From == strconv.Itoa(build)) &&
				len(c.SourcePaths) == 1 && strings.HasSuffix(c.SourcePaths[0], "/bin/fenceproxy") {
				copied = c.DestPath
			}
		case *instructions.HealthCheckCommand:
			if c.Health != nil && len(c.Health.Test) > 0 && c.Health.Test[0] == "CMD-SHELL" {
				bad("HEALTHCHECK in shell form: the final image has no shell")
			}
		}
	}
	if copied == "" {
		bad("final stage does not COPY --from the build stage the binary `make build` writes (bin/fenceproxy)")
	}
	if len(users) == 0 {
		bad("final stage has no USER: it would run as root")
	} else {
		u := users[len(users)-1]
		uid, gid, _ := strings.Cut(u, ":")
		n, err := strconv.ParseUint(uid, 10, 32)
		if err != nil || n == 0 {
			bad("USER %q: want a numeric non-root uid (runAsNonRoot can verify only a number)", u)
		} else if n != SidecarUID {
			bad("USER %q: the manifests run it as %d", u, SidecarUID)
		}
		if gid != "" {
			if _, err := strconv.ParseUint(gid, 10, 32); err != nil {
				bad("USER %q: the group must be numeric too", u)
			}
		}
	}
	for _, p := range ports {
		if !slices.Contains(exposed, p) && !slices.Contains(exposed, p+"/tcp") {
			bad("EXPOSE lacks %s (have %v)", p, exposed)
		}
	}
	switch {
	case entry == nil:
		bad("final stage has no ENTRYPOINT")
	case entry.PrependShell:
		bad("ENTRYPOINT in shell form: use exec (JSON) form, the final image has no shell")
	case len(entry.CmdLine) == 0 || entry.CmdLine[0] != copied:
		bad("ENTRYPOINT %v does not start the copied binary %s", entry.CmdLine, copied)
	}
	return probs
}

// defaultPorts returns the ports of fenceproxy's default FENCE_LISTEN_ADDR
// and FENCE_ADMIN_ADDR, as config.Load reads them.
func defaultPorts(t *testing.T) []string {
	t.Helper()
	cfg, err := config.Load(map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000"})
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, a := range []string{cfg.ListenAddr, cfg.AdminAddr} {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	return ports
}

// goMinor returns go.mod's language version as major.minor ("1.26").
func goMinor(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			if parts := strings.SplitN(strings.TrimSpace(v), ".", 3); len(parts) >= 2 {
				return parts[0] + "." + parts[1]
			}
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDockerfile(t *testing.T) {
	data := readRepoFile(t, "Dockerfile")
	if probs := checkDockerfile(data, goMinor(t), defaultPorts(t)); len(probs) > 0 {
		t.Errorf("Dockerfile:\n  %s", strings.Join(probs, "\n  "))
	}
}

// TestMakeBuildIsStatic ties "CGO off" to the target the image runs: make's
// build recipe must set CGO_ENABLED=0 and write bin/fenceproxy.
func TestMakeBuildIsStatic(t *testing.T) {
	mk := string(readRepoFile(t, "Makefile"))
	_, recipe, ok := strings.Cut(mk, "\nbuild:")
	if !ok {
		t.Fatal("Makefile has no build target")
	}
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	for _, want := range []string{"CGO_ENABLED=0", "-o bin/fenceproxy", "./cmd/fenceproxy", "-X main.version=$(VERSION)"} {
		if !strings.Contains(recipe, want) && !(want == "-X main.version=$(VERSION)" && strings.Contains(mk, "-X main.version=$(VERSION)")) {
			t.Errorf("Makefile build target lacks %q:\n%s", want, recipe)
		}
	}
}

// TestDockerfileChecksCanFail breaks the Dockerfile one property at a time:
// each must be reported.
func TestDockerfileChecksCanFail(t *testing.T) {
	good := string(readRepoFile(t, "Dockerfile"))
	goVersion, ports := goMinor(t), defaultPorts(t)
	if probs := checkDockerfile([]byte(good), goVersion, ports); len(probs) > 0 {
		t.Fatalf("the real Dockerfile must pass first: %v", probs)
	}
	cases := []struct {
		name, old, new, want string
	}{
		{"root user", "USER 65532:65532", "USER root", "numeric non-root"},
		{"uid 0", "USER 65532:65532", "USER 0:0", "numeric non-root"},
		{"no user", "USER 65532:65532\n", "", "no USER"},
		{"other uid", "USER 65532:65532", "USER 1000:1000", "the manifests run it as"},
		{"no admin port", "EXPOSE 8080 9090", "EXPOSE 8080", "EXPOSE lacks 9090"},
		{"no data port", "EXPOSE 8080 9090", "EXPOSE 9090", "EXPOSE lacks 8080"},
		{"shell entrypoint", `ENTRYPOINT ["/fenceproxy"]`, "ENTRYPOINT /fenceproxy", "shell form"},
		{"no entrypoint", `ENTRYPOINT ["/fenceproxy"]`, "", "no ENTRYPOINT"},
		{"shell cmd", `CMD ["serve"]`, "CMD serve", "CMD in shell form"},
		{"shell in final", "FROM gcr.io/distroless/static-debian12:nonroot", "FROM debian:bookworm-slim", "want gcr.io/distroless/static"},
		{"run in final", "USER 65532:65532", "RUN echo hi\nUSER 65532:65532", "final image has no shell"},
		{"go build instead of make", `make build VERSION="$VERSION"`, "go build -o bin/fenceproxy ./cmd/fenceproxy", "runs `make build`"},
		{"ldflags override", `make build VERSION="$VERSION"`, `make build VERSION="$VERSION" LDFLAGS=-X`, "overrides LDFLAGS"},
		{"cgo on", `GOOS=$TARGETOS`, `CGO_ENABLED=1 GOOS=$TARGETOS`, "CGO_ENABLED=1"},
		{"no version", ` VERSION="$VERSION"`, ``, "not passed VERSION"},
		{"no version arg", "ARG VERSION=dev\n", "", "no ARG VERSION"},
		{"old go", "golang:1.26-bookworm", "golang:1.25-bookworm", "want Go " + goVersion},
		{"not the built binary", "COPY --from=build /src/bin/fenceproxy /fenceproxy", "COPY --from=build /usr/local/go/bin/go /fenceproxy", "does not COPY --from the build stage"},
		{"single stage", "FROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /src/bin/fenceproxy /fenceproxy\n", "", "1 stage(s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("the Dockerfile no longer contains %q: update this case", tc.old)
			}
			bad := strings.Replace(good, tc.old, tc.new, 1)
			probs := checkDockerfile([]byte(bad), goVersion, ports)
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("want a problem containing %q, got %q", tc.want, probs)
			}
		})
	}
	// Fewer than two stages.
	one := "FROM scratch\nCOPY bin/fenceproxy /fenceproxy\nUSER 65532\nEXPOSE 8080 9090\nENTRYPOINT [\"/fenceproxy\"]\n"
	if probs := checkDockerfile([]byte(one), goVersion, ports); !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, "1 stage(s)") }) {
		t.Errorf("a single-stage Dockerfile passed: %q", probs)
	}
}

// buildInputs lists, relative to the repository root, every file `make
// build` reads: go.mod, go.sum, the Makefile, and the Go and embedded files
// of the module's packages that cmd/fenceproxy imports.
func buildInputs(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if and .Module (eq .Module.Path "github.com/fenceproxy/fenceproxy")}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`, "./cmd/fenceproxy")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"go.mod", "go.sum", "Makefile"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %v", files)
	}
	return files
}

// checkDockerignore returns the build inputs the patterns leave out of the
// build context, and the files that must stay out but are let in.
func checkDockerignore(data []byte, inputs []string) []string {
	patterns, err := ignorefile.ReadAll(bytes.NewReader(data))
	if err != nil {
		return []string{err.Error()}
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return []string{err.Error()}
	}
	var probs []string
	for _, f := range inputs {
		if ok, _ := pm.MatchesOrParentMatches(f); ok {
			probs = append(probs, "excludes "+f+", which make build reads")
		}
	}
	for _, f := range []string{".git/HEAD", "bin/fenceproxy", "fenceproxy.db", "cmd/fenceproxy/fenceproxy.db", "deploy/go.mod", "proxy/proxy.test"} {
		if ok, _ := pm.MatchesOrParentMatches(f); !ok {
			probs = append(probs, "lets "+f+" into the build context")
		}
	}
	return probs
}

func TestDockerignore(t *testing.T) {
	inputs := buildInputs(t)
	data := readRepoFile(t, ".dockerignore")
	if probs := checkDockerignore(data, inputs); len(probs) > 0 {
		t.Errorf(".dockerignore:\n  %s", strings.Join(probs, "\n  "))
	}
	for _, tc := range []struct{ name, add, want string }{
		{"makefile", "Makefile", "excludes Makefile"},
		{"lua", "**/*.lua", "admit.lua"},
		{"go.sum", "go.sum", "excludes go.sum"},
		{"keep git", "!.git", "lets .git/HEAD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := checkDockerignore(append(slices.Clone(data), "\n"+tc.add+"\n"...), inputs)
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("adding %q: want a problem containing %q, got %q", tc.add, tc.want, probs)
			}
		})
	}
}

// TestMakeBuildInBuildContext does what the build stage does: copies the
// build context (the repository less what .dockerignore excludes) and runs
// `make build VERSION=...` in it, then checks that the binary is static
// (nothing for a distroless static or scratch image to lack) and carries the
// version. Skipped with -short: a cold build takes about a minute on 2 cores.
func TestMakeBuildInBuildContext(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenceproxy; skipped with -short")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	patterns, err := ignorefile.ReadAll(bytes.NewReader(readRepoFile(t, ".dockerignore")))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()
	err = filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		excluded, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			return err
		}
		switch {
		case excluded && d.IsDir() && !pm.Exclusions():
			return filepath.SkipDir
		case excluded || !d.Type().IsRegular() && !d.IsDir():
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(ctx, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(ctx, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	const version = "v0.0.0-deploytest"
	mk := exec.Command("make", "build", "VERSION="+version)
	mk.Dir = ctx
	mk.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build in the build context: %v\n%s", err, out)
	}
	bin := filepath.Join(ctx, "bin", "fenceproxy")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("bin/fenceproxy has an ELF interpreter: it is dynamically linked (CGO on?)")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("bin/fenceproxy needs shared libraries %v", libs)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), version) {
		t.Errorf("fenceproxy version printed %q, want %s (the VERSION build ARG)", out, version)
	}
}
