// Command faults runs fenceproxy's fault and load suite: real redis-server,
// sentinel, etcd and fenceproxy processes on 127.0.0.1, faults injected
// mid-load, every operation's history checked (see docs/faults.md).
//
//	go run ./cmd/faults -mode short          # CI: about 5 minutes
//	go run ./cmd/faults -mode long           # longer, more injections
//	go run ./cmd/faults -run 'redis-(kill|pause)'
//	go run ./cmd/faults -break memory -run load   # a broken proxy: must fail
//
// It prints one scenario= line per scenario (and measure= lines) on stdout,
// progress and violations on stderr, and exits 1 when a safety figure is
// non-zero, a history is not linearizable, or a scenario could not run.
// Without an etcd binary etcd-leader-kill cannot run; with FENCE_SKIP_ETCD
// set it prints a skip= line instead, and does not fail the run.
// The proxies run with the drain barrier (FENCE_DRAIN=on), so the order
// figures (inversions, overlaps: the upstream seeing requests out of token
// order) are safety figures too; only the load-drain-off measurement runs
// them without it, and reports its order figures without failing on them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/internal/harness"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "short", "short (CI, about 5 minutes), long, or smoke (seconds; the suite's own tests)")
	bin := fs.String("bin", "", "fenceproxy binary (default: build ./cmd/fenceproxy of the enclosing repository)")
	sel := fs.String("run", "", "run only the scenarios whose name matches this regexp")
	brk := fs.String("break", "", "start a deliberately broken system to show the checks fail: "+strings.Join(harness.Breaks, ", "))
	keep := fs.Bool("keep", false, "keep the work directory (logs, AOF files) even when every scenario passed")
	dir := fs.String("dir", "", "parent of the work directory (default: the system's temporary directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := harness.Options{Mode: *mode, Bin: *bin, Break: *brk, Keep: *keep, Dir: *dir, Out: stdout, Log: stderr}
	if *sel != "" {
		re, err := regexp.Compile(*sel)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		opts.Run = re
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	t0 := time.Now()
	results, err := harness.Run(ctx, opts)
	if err != nil {
		return err
	}
	var failed []string
	for _, r := range results {
		if r.Failed() {
			failed = append(failed, r.Name)
		}
	}
	fmt.Fprintf(stderr, "faults: %d scenarios in %v\n", len(results), time.Since(t0).Round(time.Second))
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted")
	}
	if len(failed) > 0 {
		return fmt.Errorf("FAILED: %s", strings.Join(failed, ", "))
	}
	return nil
}
