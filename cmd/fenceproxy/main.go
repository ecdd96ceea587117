// Command fenceproxy is the fencing reverse proxy: it stands in front of an
// HTTP service and forwards only requests whose fencing token is not older
// than the resource's high-water mark.
//
//	fenceproxy [serve]   serve (the default)
//	fenceproxy authz     answer fencing decisions for nginx, Traefik, Envoy or Istio; no upstream
//	fenceproxy check     validate the environment and routes file, print the route table, then exit
//	fenceproxy check --connect   also try the store, Redis's settings and the upstream
//	fenceproxy demo      replay the stale-lease story with no setup
//	fenceproxy version   print the version (also --version)
//
// Configuration is the environment (FENCE_*) plus an optional routes file;
// see the README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], config.Environ(os.Environ()), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenceproxy:", err)
		os.Exit(exitCode(err))
	}
}

// usageError is a command-line mistake (exit 2), as opposed to a
// configuration or runtime failure (exit 1).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

const usage = `usage: fenceproxy [serve | authz | check [--connect] | store init | marks get|list|raise|reset | token keygen|sign | inject [flags] [FILE...] | demo [flags] | version | help]

  serve     run the proxy (the default)
  authz     answer fencing decisions for a proxy you already run (nginx
            auth_request, Traefik ForwardAuth, Envoy/Istio ext_authz over
            HTTP, and gRPC on FENCE_AUTHZ_GRPC_ADDR); no upstream
  check     validate the FENCE_* environment and the routes file, print the
            route table in effect, then exit; nothing is contacted
            --connect  also try what can fail at start: the store (Redis PING
                       and its persistence and eviction settings; the bolt
                       file's lock and directory) and a TCP connect to the
                       upstream; one line per check, exit 1 if one FAILED
  store     store init [--force]: write the store's identity record
  marks     get, list, raise (forward only) or reset (--force) marks; -o json
            (each with -h for its usage)
  token     keygen: write a signing key (private JWK and public JWK Set);
            sign: print a signed token for --fence N (each with -h)
  inject    add fenceproxy to Kubernetes YAML (stdin or files): a native
            sidecar, the Services sent to it, a NetworkPolicy (-h)
  demo      replay the stale-lease story against a real fenceproxy, then keep
            serving it (flags: -once, -listen addr, -pause duration; -h)
  version   print the version (also --version)
  help      this text and every FENCE_* variable (--markdown: as a table)

Configuration: FENCE_* environment variables and an optional routes file
(FENCE_ROUTES_FILE); see the README.`

// run is the whole program with its inputs made explicit, so tests can run it
// in-process. It returns when ctx is cancelled (after draining) or on error.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "demo":
		return demo(ctx, args, stdout, stderr)
	case "check":
		return check(ctx, args, environ, stdout)
	case "store":
		return storeCmd(ctx, args, environ, stdout, stderr)
	case "marks":
		return marksCmd(ctx, args, environ, stdout, stderr)
	case "token":
		return tokenCmd(args, stdout, stderr)
	case "inject":
		return injectCmd(args, os.Stdin, stdout)
	case "help", "-h", "--help":
		return help(args, stdout)
	}
	if len(args) == 1 && isHelp(args[0]) && (cmd == "serve" || cmd == "authz" || cmd == "version") {
		fmt.Fprintln(stdout, usage)
		return nil
	}
	if len(args) > 0 {
		return &usageError{fmt.Sprintf("%s takes no arguments\n%s", cmd, usage)}
	}
	switch cmd {
	case "serve":
		cfg, err := loadConfig(environ)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stderr, serveHooks{})
	case "authz":
		cfg, err := loadConfigWith(config.LoadAuthz, environ)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stderr, serveHooks{})
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "fenceproxy", buildVersion())
		return nil
	}
	return &usageError{fmt.Sprintf("unknown command %q\n%s", cmd, usage)}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// parseFlags parses a subcommand's args into fs, flags before, between or
// after the arguments (`marks reset orders/42 --force` as the usage line
// shows it); after "--" everything is an argument. fs.Args() then holds the
// arguments in order. With -h or -help it prints head and the flags to
// stdout and reports helped: the subcommand is done (exit 0). A bad flag is
// a usage error that carries them. fs prints nothing itself: the one error
// goes up to main.
func parseFlags(fs *flag.FlagSet, args []string, head string, stdout io.Writer) (helped bool, err error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for err == nil {
		if err = fs.Parse(args); err != nil {
			break
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...) // Parse stopped at "--"
			break
		}
		if len(rest) == 0 {
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	if err == nil {
		// Leaves the flags as parsed and fs.Args() as the arguments.
		err = fs.Parse(append([]string{"--"}, positional...))
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(stdout, flagsUsage(fs, head))
		return true, nil
	case err != nil:
		return false, &usageError{fmt.Sprintf("%v\n%s", err, flagsUsage(fs, head))}
	}
	return false, nil
}

// flagsUsage is head followed by fs's flags.
func flagsUsage(fs *flag.FlagSet, head string) string {
	var b strings.Builder
	b.WriteString(head + "\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return strings.TrimRight(b.String(), "\n")
}

// loadConfig validates everything that can be checked without the network:
// the environment, the routes file, and the route table as chi builds it.
func loadConfig(environ map[string]string) (*config.Config, error) {
	return loadConfigWith(config.Load, environ)
}

// loadConfigWith is loadConfig with load reading the environment
// (config.Load, or config.LoadAuthz for the authorization mode).
func loadConfigWith(load func(map[string]string) (*config.Config, error), environ map[string]string) (*config.Config, error) {
	cfg, err := load(environ)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	if err := proxy.CheckRoutes(cfg.Routes); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%s: %w", cfg.RoutesFile, err)
	}
	return cfg, nil
}

// buildInfo is fenceproxy_build_info: 1, labelled with what was built, so
// a dashboard can tell which versions run (and a rollout's progress).
func buildInfo() prometheus.Collector {
	revision := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenceproxy_build_info",
		Help: "Always 1; the labels say which fenceproxy this is (version, Go version, VCS revision).",
	}, []string{"version", "goversion", "revision"})
	g.WithLabelValues(buildVersion(), runtime.Version(), revision).Set(1)
	return g
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
