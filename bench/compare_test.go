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

// drainParts are the summary line's parts about the drain barrier:
// fenceproxy (barrier on, the default) against fenceproxy-nodrain
// (FENCE_DRAIN=off) in the same rounds, and the latter's functional check.
var drainParts = regexp.MustCompile(` \| nodrain/go-plain=([0-9.]+).* \| drain-on/off=([0-9.]+).* nodrain-check=(\S+) stale-check=`)

// cpuParts are the summary line's CPU goals (per admitted request) at the
// setting none: fenceproxy against go-plain, Redis with the barrier on
// against off, fenceproxy-trace-unsampled (tracing wired, nothing sampled)
// against fenceproxy; then Redis's commands per request, on and off.
var cpuParts = regexp.MustCompile(` \| cpu/go-plain=([0-9.]+) goal<=0\.75:(met|MISSED) \| redis-cpu-on/off=([0-9.]+) goal<=1\.20:(met|MISSED) \| cpu-trace-unsampled/off=([0-9.]+) goal<=1\.03:(met|MISSED) .*\| commands/req fenceproxy=([0-9.]+)\(scripts ([0-9.]+)\) fenceproxy-nodrain=([0-9.]+)\(scripts ([0-9.]+)\) .* trace-check=(\S+) `)

// luaParts are the summary line's parts against nginx-lua, when its module is installed.
var luaParts = regexp.MustCompile(` \| beat-nginx-lua thr=([0-9.]+):(met|MISSED) cpu\+redis=([0-9.]+):(met|MISSED) .* lua-check=(\S+) `)

// wakeLine is the drain-wake line that follows each summary line.
var wakeLine = regexp.MustCompile(`^drain-wake\[redis=(none|durable)\]: [^|]*fenceproxy n=\d+ after-older p50=([0-9.-]+)ms [^|]* overlapped=(\d+) [^|]*\| fenceproxy-nodrain n=\d+ `)

// TestCompareQuick runs bench/compare.sh in QUICK mode for one round against
// Redis without persistence, and checks that the harness works: it builds
// and starts everything, fenceproxy passes the functional checks, and the
// summary line parses. It asserts nothing about speed: the numbers of one
// short round on a shared machine are not a result.
func TestCompareQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis, nginx, six proxies and wrk for about a minute")
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
	lines := bytes.Split(out, []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("want a compare line and a drain-wake line, got:\n%s\nstderr:\n%s", out, stderr.String())
	}
	m := summaryLine.FindSubmatch(lines[0])
	if m == nil {
		t.Fatalf("summary line does not parse:\n%s\nstderr:\n%s", lines[0], stderr.String())
	}
	if got := string(m[10]); got != "ok" {
		t.Errorf("stale-check=%s, want ok\nstderr:\n%s", got, stderr.String())
	}
	for i, name := range map[int]string{2: "fenceproxy rps", 4: "go-plain rps", 6: "thr/go-plain"} {
		if v, err := strconv.ParseFloat(string(m[i]), 64); err != nil || v <= 0 {
			t.Errorf("%s = %q, want a positive number", name, m[i])
		}
	}
	d := drainParts.FindSubmatch(lines[0])
	if d == nil {
		t.Fatalf("summary line has no drain on/off parts:\n%s", lines[0])
	}
	if got := string(d[3]); got != "ok" {
		t.Errorf("nodrain-check=%s, want ok\nstderr:\n%s", got, stderr.String())
	}
	for i, name := range map[int]string{1: "nodrain/go-plain", 2: "drain-on/off"} {
		if v, err := strconv.ParseFloat(string(d[i]), 64); err != nil || v <= 0 {
			t.Errorf("%s = %q, want a positive number", name, d[i])
		}
	}
	c := cpuParts.FindSubmatch(lines[0])
	if c == nil {
		t.Fatalf("summary line has no CPU goals, commands per request or tracing check:\n%s", lines[0])
	}
	if got := string(c[11]); got != "ok" {
		t.Errorf("trace-check=%s, want ok\nstderr:\n%s", got, stderr.String())
	}
	for i, name := range map[int]string{1: "cpu/go-plain", 3: "redis-cpu-on/off", 5: "cpu-trace-unsampled/off",
		7: "commands per request, barrier on", 8: "script runs per request, on", 9: "commands per request, off", 10: "script runs per request, off"} {
		if v, err := strconv.ParseFloat(string(c[i]), 64); err != nil || v <= 0 {
			t.Errorf("%s = %q, want a positive number", name, c[i])
		}
	}
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_http_lua_module.so"); err == nil {
		l := luaParts.FindSubmatch(lines[0])
		if l == nil {
			t.Fatalf("nginx-lua is installed but the summary line has no parts against it:\n%s", lines[0])
		}
		if got := string(l[5]); got != "ok" {
			t.Errorf("lua-check=%s, want ok", got)
		}
	}
	w := wakeLine.FindSubmatch(lines[1])
	if w == nil {
		t.Fatalf("drain-wake line does not parse:\n%s", lines[1])
	}
	// With the barrier on, a newer request never reaches the origin while
	// the older one it waited for is still there (the timing is not asserted).
	if got := string(w[3]); got != "0" {
		t.Errorf("with the barrier on, the newer request reached the origin during the older one %s times:\n%s", got, lines[1])
	}
	t.Logf("%s", out)
}
