package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

const statusBrowserRoutes = `routes:
  - name: docs
    path: /docs/{id}
    resource: docs/{id}
  - name: trial
    path: /trial/{id}
    resource: trial/{id}
    enforce: false
  - name: inventory-reservations-by-warehouse
    path: /inventory/{warehouse}/reservations/{id}
    resource: inventory/{warehouse}/reservations/{id}
`

// The status page as an operator sees it: the real binary on a Redis with
// a password, some admitted writes, stale refusals on two resources, a
// missing token and a dry-run would_stale, then the admin port's / rendered
// by headless Chromium and read from the DOM. FENCE_UPDATE_SCREENSHOT=1
// writes the full-page screenshot to docs/status.png.
func TestStatusPageInBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not found: apt-get install -y chromium (.ci/run installs it)")
		}
		t.Skip("chromium not found (apt-get install -y chromium): the status page is not checked in a browser")
	}
	bin := buildBinary(t)

	// The password is set once the server answers: redistest's readiness
	// PING does not authenticate.
	const password = "Pw-0f-The-St4tus-Test"
	rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	if err := rs.Client(t).ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	up := newCountingUpstream(t)
	r := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_REDIS_URL":    "redis://default:" + password + "@" + rs.Addr() + "/0",
		"FENCE_ROUTES_FILE":  writeRoutes(t, statusBrowserRoutes),
	})

	for _, w := range []struct {
		path, token string
		status      int
	}{
		{"/docs/a", "10", 200},
		{"/docs/a", "11", 200},
		{"/docs/b", "20", 200},
		{"/docs/a", "9", 409}, // stale: mark 11
		{"/docs/a", "8", 409},
		{"/docs/a", "7", 409},  // docs/a: 3 stale, the hottest
		{"/docs/b", "19", 409}, // stale: mark 20
		{"/docs/c", "", 428},   // missing token
		{"/trial/x", "5", 200}, // dry run: admitted
		{"/trial/x", "4", 200}, // dry run: would_stale (mark 5), forwarded
		{"/trial/y", "", 200},  // dry run: would_missing, forwarded
		{"/trial/y", "x", 200}, // dry run: would_malformed, forwarded
		// A long route name and every decision column: the table must
		// still fit the window, the name unbroken.
		{"/inventory/eu-west-1/reservations/r-000000000001", "123456789", 200},
		{"/inventory/eu-west-1/reservations/r-000000000001", "123456788", 409},
		{"/inventory/eu-west-1/reservations/r-000000000002", "", 428},
		{"/inventory/eu-west-1/reservations/r-000000000003", "12a", 400},
		{"/inventory/eu-west-1/reservations/r;1", "5", 400}, // bad_request
	} {
		if a := put(t, r.data, w.path, w.token); a.status != w.status {
			t.Fatalf("PUT %s token %q: %d, want %d", w.path, w.token, a.status, w.status)
		}
	}
	// The rates need a reading a second older than now: the sampler takes
	// its first at start.
	waitFor(t, "rates over a known window", func() bool {
		var s struct {
			Rates struct{ WindowSeconds float64 }
		}
		return json.Unmarshal([]byte(body(t, r.admin+"/status.json")), &s) == nil && s.Rates.WindowSeconds > 0
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1400, 900))
	if os.Geteuid() == 0 {
		// Chromium refuses to start its sandbox as root, which is how CI
		// runs (in a container): only then run it without.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	// The first Run starts the browser and lives as long as bctx; the
	// timeout bounds each step below.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	tctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(r.admin+"/"), chromedp.WaitVisible(chromedp.CSS("#config"))); err != nil {
		t.Fatal(err)
	}
	// innerText of every cell, row by row: what a person reads.
	cells := func(table string) [][]string {
		t.Helper()
		rows, err := chromedp.Run(tctx, chromedp.Evaluate[[][]string](`Array.from(document.querySelectorAll(`+
			`"#`+table+` tr")).map(tr => Array.from(tr.cells).map(c => c.innerText.trim()))`))
		if err != nil {
			t.Fatalf("reading #%s: %v", table, err)
		}
		return rows
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}

	if kind, answering := text("#store-kind"), text("#store-answering"); kind != "redis" || answering != "yes" {
		t.Errorf("store %q answering %q, want redis answering yes", kind, answering)
	}
	if state, lost, ready := text("#store-state"), text("#store-lost"), text("#store-ready"); !strings.HasPrefix(state, "ok") ||
		lost != "no" || !strings.HasPrefix(ready, "yes") {
		t.Errorf("store state %q, lost %q, ready %q; want ok, no, yes", state, lost, ready)
	}

	// At 1400 px nothing scrolls sideways, neither the page nor a table,
	// and no route or setting name is broken over two lines.
	layout, err := chromedp.Run(tctx, chromedp.Evaluate[[][]string](`(() => {
		const wide = Array.from(document.querySelectorAll("table")).
			filter(t => t.getBoundingClientRect().right > document.documentElement.clientWidth ||
				(t.parentElement.scrollWidth > t.parentElement.clientWidth)).map(t => t.id);
		if (document.documentElement.scrollWidth > document.documentElement.clientWidth) wide.push("the page");
		const broken = Array.from(document.querySelectorAll("#rates tbody th, #refusals td:nth-child(2), #contested td:nth-child(3), #config tbody th")).
			filter(el => { const r = document.createRange(); r.selectNodeContents(el); return r.getClientRects().length > 1; }).
			map(el => el.innerText);
		return [wide, broken];
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if len(layout[0]) > 0 {
		t.Errorf("wider than the 1400 px window: %q", layout[0])
	}
	if len(layout[1]) > 0 {
		t.Errorf("names broken over lines: %q", layout[1])
	}

	// Time, route, decision, status, resource, token, mark, detail; newest
	// first.
	refusals := cells("refusals")[1:]
	var got [][]string
	for _, row := range refusals {
		if (row[1] == "docs" || row[1] == "trial") && row[2] != "would_missing" && row[2] != "would_malformed" {
			got = append(got, row[1:7])
		}
	}
	want := [][]string{
		{"trial", "would_stale", "409", "trial/x", "4", "5"},
		{"docs", "missing", "428", "", "", ""},
		{"docs", "stale", "409", "docs/b", "19", "20"},
		{"docs", "stale", "409", "docs/a", "7", "11"},
		{"docs", "stale", "409", "docs/a", "8", "11"},
		{"docs", "stale", "409", "docs/a", "9", "11"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("refusals (route, decision, status, resource, token, mark):\n got %q\nwant %q", got, want)
	}

	// #, resource, route, stale refusals, mark, last.
	contested := cells("contested")[1:]
	if len(contested) != 4 || !slices.Equal(contested[0][:5], []string{"1", "docs/a", "docs", "3", "11"}) ||
		!slices.Equal(contested[1][:5], []string{"2", "docs/b", "docs", "1", "20"}) {
		t.Errorf("contested %q, want docs/a (3 stale, mark 11) first, then docs/b (1, mark 20)", contested)
	}

	// Route, mode, all, then one column per decision.
	rates := cells("rates")
	head := rates[0]
	row := func(route string) []string {
		for _, r := range rates[1:] {
			if r[0] == route {
				return r
			}
		}
		t.Fatalf("no route %q in the rates table %q", route, rates)
		return nil
	}
	col := func(decision string) int {
		i := slices.Index(head, decision)
		if i < 0 {
			t.Fatalf("no column %q in %q", decision, head)
		}
		return i
	}
	docs, trial := row("docs"), row("trial")
	if docs[1] != "enforcing" || !strings.HasSuffix(docs[col("admitted")], "(3)") || !strings.HasSuffix(docs[col("stale")], "(4)") ||
		!strings.HasSuffix(docs[col("missing")], "(1)") || !strings.Contains(docs[col("stale")], "/s") {
		t.Errorf("docs rates %q under %q", docs, head)
	}
	if trial[1] != "dry run" || !strings.HasSuffix(trial[col("would_stale")], "(1)") {
		t.Errorf("trial rates %q under %q", trial, head)
	}

	html, err := chromedp.Run(tctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, password) || strings.Contains(body(t, r.admin+"/status.json"), password) {
		t.Error("the status page shows the Redis password")
	}
	if !strings.Contains(html, "redis://default:xxxxx@"+rs.Addr()+"/0") {
		t.Error("the page does not show the Redis URL redacted")
	}

	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "status.png")
	if os.Getenv("FENCE_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join("..", "..", "docs", "status.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
	if dir := os.Getenv("FENCE_SCREENSHOT_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "status.png"), png, 0o644)
	}
}
