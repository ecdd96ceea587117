// Command render prints the manifests of a kustomization, as `kubectl
// kustomize` would, for users without kubectl; with -check it also decodes
// them strictly and runs the checks of the deploy tests: deploy.Check (the
// sidecar, every pod's hardening, Redis) and deploy.CheckAuthz (the
// workloads that run `fenceproxy authz`).
//
// The findings go to stderr, each labelled "error:" or "warning:". Errors
// (what breaks fencing's safety, or keeps fenceproxy from running as the
// manifests wire it) make render exit 1; warnings (generic hardening) are
// printed and do not.
//
//	cd deploy
//	go run ./cmd/render examples/sample-app                 # the YAML, ready for kubectl apply -f -
//	go run ./cmd/render -check examples/sample-app > /dev/null
//
// A FILE instead of a directory is a YAML stream already rendered (the
// output of `fenceproxy inject` or `helm template`): render prints it as it
// is and, with -check, decodes and checks it the same way; objects of kinds
// the checks do not read are named on stderr and left out.
//
//	fenceproxy inject --redis-url redis://redis:6379/0 app.yaml > fenced.yaml
//	go run ./cmd/render -check fenced.yaml > /dev/null
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/fenceproxy/fenceproxy/deploy"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "decode every object strictly and run the deploy checks; report errors and warnings on stderr, fail on errors")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: render [-check] DIR|FILE...   (a directory holding a kustomization.yaml, or a YAML file)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no directory given")
	}
	var failed []error
	for i, dir := range fs.Args() {
		out, decode, err := load(dir)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		if _, err := stdout.Write(out); err != nil {
			return err
		}
		if !*check {
			continue
		}
		objs, skipped, err := decode()
		for _, s := range skipped {
			fmt.Fprintf(stderr, "%s: not checked: %s (a kind the checks do not read)\n", dir, s)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		rep, authz := deploy.Check(objs), deploy.CheckAuthz(objs)
		errs := slices.Concat(rep.Errors, authz.Errors)
		warns := slices.Concat(rep.Warnings, authz.Warnings)
		for _, e := range errs {
			fmt.Fprintf(stderr, "%s: error: %v\n", dir, e)
		}
		for _, w := range warns {
			fmt.Fprintf(stderr, "%s: warning: %v\n", dir, w)
		}
		if len(errs) > 0 {
			failed = append(failed, fmt.Errorf("%s: %s, %s", dir, count(len(errs), "error"), count(len(warns), "warning")))
			continue
		}
		fmt.Fprintf(stderr, "%s: %d objects, checks passed (%s)\n", dir, len(objs), count(len(warns), "warning"))
	}
	return errors.Join(failed...)
}

// load renders a kustomization directory, or reads a YAML file, and
// returns the YAML to print and how to decode its objects.
func load(path string) (out []byte, decode func() ([]deploy.Object, []string, error), err error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		return data, func() ([]deploy.Object, []string, error) { return deploy.DecodeStream(data) }, nil
	}
	m, err := deploy.Build(path)
	if err != nil {
		return nil, nil, err
	}
	out, err = m.AsYaml()
	if err != nil {
		return nil, nil, err
	}
	return out, func() ([]deploy.Object, []string, error) {
		objs, err := deploy.Decode(m)
		return objs, nil, err
	}, nil
}

// count is "1 error", "2 errors".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
