package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// Options configures Run.
type Options struct {
	// Mode is "short" (CI: about five minutes for all scenarios), "long"
	// (longer load, more injections) or "smoke" (seconds per scenario: the
	// suite's own tests).
	Mode string
	// Bin is the fenceproxy binary. If empty, Run builds it from the
	// repository that contains this module (as `make build` does).
	Bin string
	// Run selects scenarios by name; nil runs all.
	Run *regexp.Regexp
	// Break starts a deliberately broken system, to show that the checks
	// can fail; empty for a real run. A control shows that the figures it
	// is judged on catch the failure it injects; only where the injected
	// failure is the broken part itself does it show that the real run's
	// pass comes from that part.
	//   - "memory": each replica its own FENCE_STORE=memory.
	//   - "bypass": some refused requests also go straight to the upstream.
	//   - "nopersist": Redis without AOF, killed, and every replica
	//     restarted with it: the loss no replica can notice (on a
	//     Cluster, every node without AOF).
	//   - "nodrain": the proxies run with FENCE_DRAIN=off while the order
	//     figures stay fatal.
	//   - "broadcast": the proxies built with the build tag faultsbreak and
	//     run with FENCEPROXY_FAULTS_BREAK=broadcast (testBreaks): every
	//     release wakes every waiter of the store, and each asks the store
	//     what is left (fencestore/redisstore/break.go). On herd it breaks
	//     the targeted wake-up itself: herd_ratio rises past its limit.
	//   - "noraise": in the store-loss scenarios the operator forces the
	//     identity record without raising the marks first.
	//   - "etcdwipe": in etcd-leader-kill a follower frozen while the
	//     others commit, both of those killed, the leader restarted on an
	//     empty data directory: a majority without the last marks.
	//   - "shortdeadline": client-gives-up and clock-step with the proxies'
	//     FENCE_UPSTREAM_TIMEOUT (100 ms) shorter than the service's
	//     processing, so that the barrier lets newer requests go while an
	//     older one is still being processed, as a proxy that released on
	//     its client's leaving, or timed deadlines by a clock that stepped,
	//     would. It emulates those failures; it does not run them.
	//   - "noretry": the proxies built with the build tag faultsbreak and
	//     run with FENCEPROXY_FAULTS_BREAK=noretry: a release the store does
	//     not acknowledge is dropped, and none is sent again when the
	//     subscription comes back. On failover-barrier it breaks the
	//     retries and re-sends themselves: the entries whose releases the
	//     failover lost hold their resources past resume_s's target.
	//   - "fullcoverage": the Cluster's nodes with
	//     cluster-require-full-coverage yes (Redis's default): from the
	//     moment the killed master is judged failed until it is replaced,
	//     every node refuses every command, so the other shards' requests
	//     get 503 too (other_shards_unavailable).
	//   - "nogeneration": redis-restore with the restored copy's generation
	//     raised above any a replica has seen, so that the generation check
	//     has nothing to refuse (as without it), and no recovery: the stale
	//     probe, which the real run refuses store-lost, is admitted
	//     (restore.go); bolt-restore with the generation file removed with
	//     the restore (boltrestore.go).
	Break string
	// Dir is where the work directories go; os.TempDir() if empty.
	Dir string
	// Keep keeps the work directory (logs, AOF files) even when every
	// scenario passed; a failed run always keeps it.
	Keep bool
	// Out receives the scenario= and measure= lines; Log the progress
	// and diagnostics.
	Out, Log io.Writer
}

// Breaks lists the valid Options.Break values.
var Breaks = []string{"memory", "bypass", "nopersist", "nodrain", "broadcast", "noraise", "etcdwipe", "shortdeadline", "noretry", "nogeneration", "fullcoverage"}

// testBreaks are the controls that break the proxy itself: no setting of
// the shipped binary turns off what they break, so they run a binary built
// with the build tag faultsbreak (testBreakTag), which reads
// testBreakVar. Every scenario of such a run uses it.
var testBreaks = map[string]bool{"broadcast": true, "noretry": true}

const (
	testBreakTag = "faultsbreak"
	testBreakVar = "FENCEPROXY_FAULTS_BREAK"
)

// Result is one scenario's outcome.
type Result struct {
	Name    string
	Measure bool // a measurement of a configuration documented as unsafe
	// DrainOff: the proxies ran with FENCE_DRAIN=off (a measure= line; the
	// order figures are measured, the safety figures still fail the run).
	DrainOff bool
	Report   check.Report
	// Problems are failed expectations (the fault had no effect, the
	// proxies did not recover) and setup errors; a scenario with problems
	// fails even when its figures are clean.
	Problems []string
	Line     string
	// Measures are measure= lines that follow Line (the load figures).
	Measures []string
	// Violations are failed safety checks of the scenario's own (slow-body:
	// the older write, small or streamed, landed after the newer one;
	// drain-wake and the expiry probes: a newer request reached the upstream
	// while an older one was in flight); any fails the run.
	Violations []string
	// Order counts what the drain barrier forbids: the report's inversions
	// and overlaps. Fails the run when InversionsFatal is set.
	Order int
	// InversionsFatal: the proxies ran with the drain barrier
	// (FENCE_DRAIN=on, their default), so the order figures are safety
	// figures. Off only where a scenario runs them with FENCE_DRAIN=off
	// to measure what the barrier buys.
	InversionsFatal bool
	Duration        time.Duration
	// Skipped says why the scenario did not run (etcd-leader-kill with no
	// etcd binary and FENCE_SKIP_ETCD set); Line is then a skip= line.
	Skipped string
}

// Failed reports whether the result fails the run: a safety figure is
// non-zero, the history is not linearizable, an admitted request never
// reached the upstream, a safety check of the scenario's own failed, or the
// scenario could not run as designed; with InversionsFatal (the drain
// barrier on) also an order figure is non-zero. A measurement of an unsafe
// configuration fails only when it could not run.
func (r *Result) Failed() bool {
	if r.Skipped != "" {
		return false
	}
	if len(r.Problems) > 0 {
		return true
	}
	if r.Measure {
		return false
	}
	if r.InversionsFatal && r.Order > 0 {
		return true
	}
	return !r.Report.Safe() || r.Report.Linearizable == "Illegal" || r.Report.MissingForwards > 0 ||
		len(r.Violations) > 0
}

// Harness owns one scenario's processes and directory.
type Harness struct {
	bin   string
	dir   string
	procs procs
	// redisEnv, when set, is added to the environment of the redis-server
	// processes it starts (a locale, the clock shim).
	redisEnv []string
}

// Run runs the selected scenarios in order, printing one line each to
// opts.Out, and returns their results. It returns an error when the run
// itself could not start (no binary, bad options); a scenario that could
// not run is a failed Result.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	p, ok := modes[opts.Mode]
	if !ok {
		return nil, fmt.Errorf("mode %q: want short, long or smoke", opts.Mode)
	}
	if opts.Break != "" && !contains(Breaks, opts.Break) {
		return nil, fmt.Errorf("break %q: want one of %s", opts.Break, strings.Join(Breaks, ", "))
	}
	var selected []*scenario
	for _, sc := range scenarios(p) {
		if opts.Run == nil || opts.Run.MatchString(sc.name) {
			selected = append(selected, sc)
		}
	}
	if len(selected) == 0 {
		return nil, errors.New("no scenario matches -run")
	}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, err
		}
	}
	root, err := os.MkdirTemp(opts.Dir, "fenceproxy-faults-")
	if err != nil {
		return nil, err
	}
	bin := opts.Bin
	if testBreaks[opts.Break] && bin != "" {
		// -bin is a real binary; this control needs the broken one.
		fmt.Fprintf(opts.Log, "faults: -break %s builds its own binary (build tag %s); -bin %s is not used\n", opts.Break, testBreakTag, bin)
		bin = ""
	}
	if bin == "" {
		var tags []string
		if testBreaks[opts.Break] {
			tags = append(tags, testBreakTag)
		}
		t0 := time.Now()
		if bin, err = build(ctx, root, tags...); err != nil {
			_ = os.RemoveAll(root)
			if len(tags) > 0 {
				return nil, fmt.Errorf("-break %s builds its own binary, from inside the repository: %w", opts.Break, err)
			}
			return nil, err
		}
		fmt.Fprintf(opts.Log, "faults: built %s in %v\n", bin, time.Since(t0).Round(time.Millisecond))
	} else if bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("fenceproxy binary: %w (run make build, or leave -bin empty to build it)", err)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		_ = os.RemoveAll(root)
		return nil, errors.New("redis-server not found on PATH: apt-get install -y redis-server")
	}

	var results []Result
	failed := false
	for _, sc := range selected {
		if ctx.Err() != nil {
			break
		}
		if why := skip(sc); why != "" {
			res := Result{Name: sc.name, Skipped: why, Line: fmt.Sprintf("skip=%s reason=%q", sc.name, why)}
			results = append(results, res)
			fmt.Fprintln(opts.Out, res.Line)
			fmt.Fprintf(opts.Log, "faults: %s: SKIPPED: %s\n", sc.name, why)
			continue
		}
		h := &Harness{bin: bin, dir: filepath.Join(root, sc.name)}
		fmt.Fprintf(opts.Log, "faults: %s ...\n", sc.name)
		res := runScenario(ctx, h, sc, p, opts)
		results = append(results, res)
		fmt.Fprintln(opts.Out, res.Line)
		for _, m := range res.Measures {
			fmt.Fprintln(opts.Out, m)
		}
		for _, pr := range res.Problems {
			fmt.Fprintf(opts.Log, "faults: %s: PROBLEM: %s\n", sc.name, pr)
		}
		for _, v := range res.Violations {
			fmt.Fprintf(opts.Log, "faults: %s: VIOLATION: %s\n", sc.name, v)
		}
		for _, ex := range res.Report.Examples {
			fmt.Fprintf(opts.Log, "faults: %s: %s\n", sc.name, ex)
		}
		orderKind := "measured"
		if res.InversionsFatal {
			orderKind = "fatal"
		}
		for _, ex := range res.Report.OrderExamples {
			fmt.Fprintf(opts.Log, "faults: %s: (%s) %s\n", sc.name, orderKind, ex)
		}
		if res.Failed() {
			failed = true
		}
	}
	if failed || opts.Keep || ctx.Err() != nil {
		fmt.Fprintf(opts.Log, "faults: logs and data kept in %s\n", root)
	} else {
		_ = os.RemoveAll(root)
	}
	return results, nil
}

// skip returns why sc cannot run here and may be skipped, or "": an etcd
// scenario with no etcd binary while FENCE_SKIP_ETCD is set (as the etcd
// store's tests skip). Without FENCE_SKIP_ETCD a missing binary fails the
// scenario's setup: CI cannot skip silently.
func skip(sc *scenario) string {
	if sc.topo != etcdCluster {
		return ""
	}
	if _, err := etcdtest.FindBin(); err != nil && etcdtest.MaySkip() {
		return "etcd not found and FENCE_SKIP_ETCD is set (bash fencestore/etcdstore/etcdtest/install-etcd.sh installs it)"
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// build compiles ./cmd/fenceproxy of the enclosing repository into dir, as
// `make build` does (static, trimmed paths), with the build tags given.
func build(ctx context.Context, dir string, tags ...string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fenceproxy")
	args := []string{"build", "-trimpath"}
	if len(tags) > 0 {
		out += "-" + strings.Join(tags, "-")
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, "./cmd/fenceproxy")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fenceproxy in %s: %w\n%s", root, err, b)
	}
	return out, nil
}

// repoRoot finds the directory of module github.com/fenceproxy/fenceproxy
// above the working directory (the faults module lives inside it).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/fenceproxy/fenceproxy\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the fenceproxy repository above the working directory; pass -bin")
		}
		dir = parent
	}
}
