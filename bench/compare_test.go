package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// summaryLine is the line compare.sh prints per Redis setting; the report
// and whoever reads the output rely on its shape.
var summaryLine = regexp.MustCompile(`^compare\[redis=(none|durable)\]: fenceproxy=(\d+)rps/p99=([0-9.]+)ms go-plain=(\d+)rps/p99=([0-9.]+)ms .*\| thr/go-plain=([0-9.]+) thr/nginx=([0-9.]+).* \| non2xx=(\d+) sockerr=(\d+).* stale-check=(\S+)$`)

// TestCompareQuick runs bench/compare.sh in QUICK mode for one round against
// Redis without persistence, and checks that the harness works: it builds
// and starts everything, fenceproxy passes the functional checks, and the
// summary line parses. It asserts nothing about speed: the numbers of one
// short round on a shared machine are not a result.
func TestCompareQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis, nginx, three proxies and wrk for about a minute")
	}
	for _, tool := range []string{"wrk", "nginx", "redis-server", "redis-cli", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./compare.sh")
	cmd.Env = append(os.Environ(), "QUICK=1", "ROUNDS=1", "REDIS_DURABLE=0",
		"PORT_BASE=28300", "OUT_DIR="+t.TempDir(), "RUN_DIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("compare.sh: %v\nstderr:\n%s", err, stderr.String())
	}
	out := bytes.TrimSpace(stdout.Bytes())
	m := summaryLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("summary line does not parse:\n%s\nstderr:\n%s", out, stderr.String())
	}
	if got := string(m[10]); got != "ok" {
		t.Errorf("stale-check=%s, want ok\nstderr:\n%s", got, stderr.String())
	}
	for i, name := range map[int]string{2: "fenceproxy rps", 4: "go-plain rps", 6: "thr/go-plain"} {
		if v, err := strconv.ParseFloat(string(m[i]), 64); err != nil || v <= 0 {
			t.Errorf("%s = %q, want a positive number", name, m[i])
		}
	}
	t.Logf("%s", out)
}
