package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
)

// connectTimeout bounds each network check of check --connect: long enough
// for a first dial with TLS and AUTH, short enough for a terminal.
const connectTimeout = 2 * time.Second

const checkUsage = "usage: fenceproxy check [--connect] [--authz]\n\n" +
	"Validates the FENCE_* environment and the routes file as a start would, and prints\n" +
	"the route table in effect. Without --connect nothing is contacted.\n\nflags:"

// check is the check subcommand: the configuration and route table, and
// with --connect the checks of what can fail at start.
func check(ctx context.Context, args []string, environ map[string]string, stdout io.Writer) error {
	fset := flag.NewFlagSet("check", flag.ContinueOnError)
	connect := fset.Bool("connect", false, "also try the store, Redis's persistence and eviction settings, and a TCP connect to the upstream")
	authz := fset.Bool("authz", false, "check the configuration of fenceproxy authz (no upstream; FENCE_AUTHZ_* read)")
	if helped, err := parseFlags(fset, args, checkUsage, stdout); helped || err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return &usageError{fmt.Sprintf("check takes no arguments, only flags\n%s", flagsUsage(fset, checkUsage))}
	}
	load := config.Load
	if *authz {
		load = config.LoadAuthz
	}
	cfg, err := loadConfigWith(load, environ)
	if err != nil {
		return err
	}
	tokens := "plain (a decimal in " + cfg.TokenHeader + ")"
	if cfg.TokenKeysFile != "" {
		keys, err := readKeySet(cfg.TokenKeysFile)
		if err != nil {
			return fmt.Errorf("FENCE_TOKEN_KEYS_FILE: %w", err)
		}
		kids := strings.Join(sortedKIDs(keys), ",")
		if kids == "" {
			kids = "none: every signed token is refused (the keys file revokes every key)"
		}
		tokens = fmt.Sprintf("signed (a JWS in %s; keys %s; leeway %s)", cfg.TokenHeader, kids, cfg.TokenLeeway)
	}
	target := "upstream=" + cfg.UpstreamURL.Redacted()
	if cfg.Authz.Mode {
		target = "mode=authz"
		if cfg.Authz.GRPCAddr != "" {
			target += " grpc=" + cfg.Authz.GRPCAddr
		}
	}
	fmt.Fprintf(stdout, "configuration ok: store=%s %s routes=%d\ntokens: %s\n\n",
		cfg.Store, target, len(cfg.Routes.Routes), tokens)
	printRoutes(stdout, cfg)
	if !*connect {
		return nil
	}
	fmt.Fprintln(stdout)
	results := checkStore(ctx, cfg)
	if !cfg.Authz.Mode {
		results = append(results, checkUpstream(ctx, cfg))
	}
	failed := 0
	for _, r := range results {
		fmt.Fprintf(stdout, "%-8s %s: %s\n", r.level, r.name, r.detail)
		if r.level == "FAILED" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("check --connect: %d of %d checks FAILED", failed, len(results))
	}
	return nil
}

// printRoutes prints the route table in effect, one route a line, the
// default rule last.
func printRoutes(w io.Writer, cfg *config.Config) {
	if cfg.RoutesFile == "" {
		fmt.Fprintln(w, "routes: no routes file (FENCE_ROUTES_FILE), so every fenced write shares the one resource\n"+
			"\"default\" and two unrelated writers fence each other; a routes file gives each resource its own mark")
	} else {
		fmt.Fprintf(w, "routes from %s (chi's order: static beats {param} beats wildcard):\n", cfg.RoutesFile)
	}
	// The SEQUENCE column appears once a rule orders by sequence, so the
	// table of a file without one reads as it always has.
	hasSequence := func(r config.Route) bool { return r.Sequence != config.SequenceOff }
	sequences := hasSequence(cfg.Routes.Default) || slices.ContainsFunc(cfg.Routes.Routes, hasSequence)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if sequences {
		fmt.Fprintln(tw, "  NAME\tMETHODS\tPATH\tCASE\tRESOURCE\tCOMPARE\tTOKEN\tSEQUENCE\tFENCE")
	} else {
		fmt.Fprintln(tw, "  NAME\tMETHODS\tPATH\tCASE\tRESOURCE\tCOMPARE\tTOKEN\tFENCE")
	}
	row := func(r config.Route, path, pathCase string) {
		methods := strings.Join(r.Methods, ",")
		if methods == "" {
			methods = "-"
		}
		resource, compare, token, sequence, fence := "-", "-", "-", "-", "off"
		if r.Fence {
			resource, compare, token, sequence, fence = r.Resource.Raw, string(r.Compare), "required", r.Sequence.String(), "on"
			if r.TokenOptional {
				token = "optional"
			}
			if r.NoDrain || !cfg.Drain || cfg.Authz.Mode {
				fence = "on, no drain" // out of the drain barrier
			}
			if r.DryRun {
				fence += ", dry run" // enforce: false
			}
		}
		if sequences {
			token += "\t" + sequence
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, methods, path, pathCase, resource, compare, token, fence)
	}
	for _, r := range cfg.Routes.Routes {
		pathCase := "sensitive"
		if r.CaseInsensitive {
			pathCase = "insensitive"
		}
		row(r, r.Path, pathCase)
	}
	row(cfg.Routes.Default, "(any path no route matches)", "-")
	_ = tw.Flush()
	fmt.Fprintln(w, "A route matches only the methods it lists; a request no route matches gets the default rule,\n"+
		"and a method the default rule does not list is forwarded unfenced.")
	drainTimeout := "unset: wait until older requests end or reach their deadlines"
	if cfg.DrainTimeout > 0 {
		drainTimeout = cfg.DrainTimeout.String()
	}
	if cfg.Drain {
		fmt.Fprintf(w, "Drain barrier: on (FENCE_DRAIN); an admitted request waits while an older one of its resource is in flight\n"+
			"  (FENCE_DRAIN_TIMEOUT %s; FENCE_UPSTREAM_TIMEOUT %s).\n", drainTimeout, cfg.UpstreamTimeout)
	} else {
		fmt.Fprintf(w, "Drain barrier: off (FENCE_DRAIN=off): an older admitted request can still reach the upstream after a newer one\n"+
			"  (FENCE_UPSTREAM_TIMEOUT %s).\n", cfg.UpstreamTimeout)
	}
}

// checkResult is one line of check --connect.
type checkResult struct {
	level  string // ok, warning, FAILED or skipped
	name   string
	detail string
}

func checkStore(ctx context.Context, cfg *config.Config) []checkResult {
	switch cfg.Store {
	case config.StoreMemory:
		return []checkResult{{"warning", "store", "memory: nothing to reach, but marks live in the process only and vanish " +
			"on restart; use it for tests and demos only"}}
	case config.StoreBolt:
		return []checkResult{checkBolt(cfg.BoltPath)}
	case config.StoreRedis:
		return checkRedis(ctx, cfg)
	}
	return []checkResult{{"FAILED", "store", fmt.Sprintf("unknown store %q", cfg.Store)}}
}

// checkBolt checks that the store file can be opened as serve opens it,
// without changing it: a new file's directory must take a file, an existing
// file must open for writing, be a bbolt file, and not be locked by another
// process (a running fenceproxy). The lock is shared and held for a moment.
func checkBolt(path string) checkResult {
	fail := func(format string, a ...any) checkResult {
		return checkResult{"FAILED", "store", "bolt: " + fmt.Sprintf(format, a...)}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode().IsRegular() && fi.Size() == 0:
		// serve will create (or initialise) it: its directory must take a
		// new file. A temporary one shows that, and is removed at once.
		dir := filepath.Dir(path)
		f, err := os.CreateTemp(dir, ".fenceproxy-check-*")
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // not the temporary file's name
			}
			return fail("%s cannot be created: directory %s: %v", path, dir, err)
		}
		_ = f.Close()
		_ = os.Remove(f.Name())
		return checkResult{"ok", "store", fmt.Sprintf("bolt: %s will be created; its directory is writable", path)}
	case err != nil:
		return fail("%v", err)
	case !fi.Mode().IsRegular():
		return fail("%s is not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fail("%s cannot be opened for writing: %v", path, err)
	}
	_ = f.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fail("%s is locked by another process (a running fenceproxy?)", path)
	case err != nil:
		return fail("%s is not a usable bbolt file: %v", path, err)
	}
	_ = db.Close()
	return checkResult{"ok", "store", fmt.Sprintf("bolt: %s opens and is not locked", path)}
}

// checkRedis pings Redis and judges its settings as the running proxy would
// (settingsPolicy.judge), with the same words.
func checkRedis(ctx context.Context, cfg *config.Config) []checkResult {
	// go-redis prints every failed dial to stderr; the result says why.
	redis.SetLogger(redisLog{zap.NewNop()})
	client, err := redisClient(&cfg.Redis)
	if err != nil {
		return []checkResult{{"FAILED", "store", err.Error()}}
	}
	s := redisstore.New(client, redisstore.Options{KeyPrefix: cfg.KeyPrefix, MaxBatch: -1})
	defer s.Close()
	policy := settingsPolicy{eviction: cfg.Redis.Eviction, persistence: cfg.Redis.Persistence, stated: cfg.Redis.Settings}
	settingChecks := func(level, detail string) []checkResult {
		var out []checkResult
		if policy.eviction != config.EvictionOff {
			out = append(out, checkResult{level, "redis eviction", detail})
		}
		if policy.persistence != config.PersistenceOff {
			out = append(out, checkResult{level, "redis persistence", detail})
		}
		return out
	}

	timeout := max(cfg.StoreTimeout, connectTimeout)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	if err := s.Ping(pctx); err != nil {
		return append([]checkResult{{"FAILED", "store", "redis does not answer PING: " + err.Error()}},
			settingChecks("skipped", "not checked: redis does not answer")...)
	}
	took := time.Since(t0)
	out := []checkResult{{"ok", "store", fmt.Sprintf("redis answers PING (%v)", roundTrip(took))}}
	if took > cfg.StoreTimeout {
		out[0] = checkResult{"warning", "store", fmt.Sprintf("redis answers PING in %v, more than FENCE_STORE_TIMEOUT (%v): "+
			"admissions that slow are refused with 503", roundTrip(took), cfg.StoreTimeout)}
	}
	// Admissions run only on a master (Redis refuses their scripts on a
	// replica): a URL that reaches a replica serves no fenced request. A
	// Cluster client finds its masters itself.
	if len(cfg.Redis.ClusterAddrs) == 0 {
		if si, err := s.Server(pctx); err == nil && si.Role != "master" {
			out[0] = checkResult{"FAILED", "store", "redis answers PING, but " + (&redisstore.RoleError{Role: si.Role}).Reason()}
		}
	}
	if policy.eviction == config.EvictionOff {
		out = append(out, checkResult{"skipped", "redis eviction", "not checked (FENCE_REDIS_EVICTION=off)"})
	}
	if policy.persistence == config.PersistenceOff {
		out = append(out, checkResult{"skipped", "redis persistence", "not checked (FENCE_REDIS_PERSISTENCE=off)"})
	}
	if !policy.enabled() {
		return out
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nodes, err := s.Settings(sctx)
	if errors.Is(err, fencestore.ErrUnavailable) {
		return append(out, settingChecks("FAILED", "cannot read the settings: "+err.Error())...)
	}
	for _, f := range policy.judge(nodes, err) {
		detail := f.text + " (" + f.setting + ")"
		if len(f.nodes) > 0 {
			detail += ": " + strings.Join(f.nodes, ", ")
		}
		var re redis.Error
		if errors.As(f.err, &re) {
			detail += "; the server said: " + strings.TrimSpace(re.Error())
		}
		out = append(out, checkResult{f.level(), "redis " + f.check, detail})
	}
	return out
}

// checkUpstream opens (and closes) a TCP connection to the upstream's host
// and port: the proxy starts without it, but forwards nothing (502) until
// it listens.
func checkUpstream(ctx context.Context, cfg *config.Config) checkResult {
	u := cfg.UpstreamURL
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	t0 := time.Now()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return checkResult{"FAILED", "upstream", fmt.Sprintf("%s does not accept TCP connections: %v", addr, err)}
	}
	_ = conn.Close()
	return checkResult{"ok", "upstream", fmt.Sprintf("%s accepts TCP connections (%v)", addr, roundTrip(time.Since(t0)))}
}

// roundTrip rounds d for a terminal: 312µs as 300µs, 1.2345s as 1.23s.
func roundTrip(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Millisecond)
}
