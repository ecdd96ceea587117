// Command render prints the manifests of a kustomization, as `kubectl
// kustomize` would, for users without kubectl; with -check it also decodes
// them strictly and runs the checks of the deploy tests.
//
//	cd deploy
//	go run ./cmd/render examples/sample-app                 # the YAML, ready for kubectl apply -f -
//	go run ./cmd/render -check examples/sample-app > /dev/null
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

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
	check := fs.Bool("check", false, "decode every object strictly and run the deploy checks; report problems on stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: render [-check] DIR...   (a directory holding a kustomization.yaml)")
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
		m, err := deploy.Build(dir)
		if err != nil {
			return err
		}
		out, err := m.AsYaml()
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
		objs, err := deploy.Decode(m)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		if err := deploy.Check(objs).Err(); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		fmt.Fprintf(stderr, "%s: %d objects, checks passed\n", dir, len(objs))
	}
	return errors.Join(failed...)
}
