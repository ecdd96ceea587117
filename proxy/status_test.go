package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

const statusRoutes = `
routes:
  - name: orders
    path: /orders/{id}
    resource: orders/{id}
  - name: trial
    path: /trial/{id}
    resource: trial/{id}
    enforce: false
`

// fakeClock is the rate sampler's clock in tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// serveAdmin answers one request of the admin handler.
func serveAdmin(t *testing.T, a http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

// statusJSON returns /status.json decoded as generic JSON, so that the
// test reads the field names a program reads.
func statusJSON(t *testing.T, a http.Handler) map[string]any {
	t.Helper()
	rec := serveAdmin(t, a, "GET", "/status.json")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/status.json: %d %q\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("/status.json does not decode: %v\n%s", err, rec.Body)
	}
	return m
}

// path walks decoded JSON: keys of objects, indexes of arrays.
func path(t *testing.T, v any, steps ...any) any {
	t.Helper()
	for _, s := range steps {
		switch s := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: %T is not an object", s, v)
			}
			if v, ok = m[s]; !ok {
				t.Fatalf("no field %q in %v", s, m)
			}
		case int:
			a, ok := v.([]any)
			if !ok || s >= len(a) {
				t.Fatalf("at [%d]: %v", s, v)
			}
			v = a[s]
		}
	}
	return v
}

// cellsOf returns the text of every cell of the table with id, row by row,
// tags removed (the page's tables are flat: no nested tables).
func cellsOf(t *testing.T, page, id string) [][]string {
	t.Helper()
	start := strings.Index(page, `<table id="`+id+`">`)
	if start < 0 {
		t.Fatalf("no table %q in the page", id)
	}
	table := page[start:]
	table = table[:strings.Index(table, "</table>")]
	tags := regexp.MustCompile(`<[^>]*>`)
	var rows [][]string
	for _, tr := range strings.Split(table, "<tr")[1:] {
		var row []string
		tr = strings.NewReplacer("<td", "\x00<td", "<th", "\x00<th").Replace(tr)
		for _, cell := range strings.Split(tr, "\x00")[1:] {
			row = append(row, strings.Join(strings.Fields(tags.ReplaceAllString(cell, "")), " "))
		}
		rows = append(rows, row)
	}
	return rows
}

// The page and the JSON show, from real requests through the proxy: the
// store answering, the rates per route and decision over the sampler's
// window (would_stale on the dry-run route), the refusals newest first with
// token and mark, and the contested resources hottest first.
func TestStatusPageFromRealRequests(t *testing.T) {
	f := newFixture(t, statusRoutes, nil)
	a := NewAdmin(AdminOptions{Store: f.store, Metrics: f.metrics, StoreKind: "memory",
		Config: func() []ConfigItem { return []ConfigItem{{Name: "FENCE_STORE", Value: "memory"}} }})
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	a.status.rates.now = clock.now
	a.status.rates.observe() // the base: every counter at 0

	f.do("PUT", "/orders/1", "Fencing-Token", "5")
	f.do("PUT", "/orders/1", "Fencing-Token", "4") // stale, mark 5
	f.do("PUT", "/orders/1", "Fencing-Token", "3") // stale, mark 5
	f.do("PUT", "/orders/2", "Fencing-Token", "9")
	f.do("PUT", "/orders/2", "Fencing-Token", "8") // stale, mark 9
	f.do("PUT", "/orders/3")                       // missing
	f.do("PUT", "/trial/1", "Fencing-Token", "7")
	if resp, _ := f.do("PUT", "/trial/1", "Fencing-Token", "6"); resp.StatusCode != 200 {
		t.Fatalf("dry run refused: %d", resp.StatusCode)
	}
	clock.t = clock.t.Add(20 * time.Second)

	rec := serveAdmin(t, a, "GET", "/")
	page := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	store := cellsOf(t, page, "store")
	for i, want := range []string{"memory", "ok: fenced requests are admitted", "yes", "no", "", "no", "yes "} {
		if !strings.HasPrefix(store[i][1], want) {
			t.Errorf("store table row %d %q, want %q first:\n%q", i, store[i][1], want, store)
		}
	}

	rates := cellsOf(t, page, "rates")
	wantHead := []string{"Route", "Mode", "all", "admitted", "stale", "missing", "would_stale"}
	if fmt.Sprint(rates[0]) != fmt.Sprint(wantHead) {
		t.Errorf("rates columns %q, want %q", rates[0], wantHead)
	}
	for _, want := range [][]string{
		{"orders", "enforcing", "0.30/s (6)", "0.10/s (2)", "0.15/s (3)", "0.05/s (1)", "0.00/s (0)"},
		{"trial", "dry run", "0.10/s (2)", "0.05/s (1)", "0.00/s (0)", "0.00/s (0)", "0.05/s (1)"},
	} {
		if !hasRow(rates, want) {
			t.Errorf("rates table lacks %q:\n%q", want, rates)
		}
	}
	if !strings.Contains(page, "over the last 20 s") {
		t.Error("the rates do not say their window")
	}

	refusals := cellsOf(t, page, "refusals")[1:]
	// Time, route, decision, status, resource, token, mark, detail.
	if len(refusals) != 5 {
		t.Fatalf("%d refusals listed, want 5: %q", len(refusals), refusals)
	}
	for i, want := range [][]string{
		{"trial", "would_stale", "409", "trial/1", "6", "7"},
		{"orders", "missing", "428", "", "", ""},
		{"orders", "stale", "409", "orders/2", "8", "9"},
		{"orders", "stale", "409", "orders/1", "3", "5"},
		{"orders", "stale", "409", "orders/1", "4", "5"},
	} {
		if fmt.Sprint(refusals[i][1:7]) != fmt.Sprint(want) {
			t.Errorf("refusal %d: %q, want %q", i, refusals[i][1:7], want)
		}
	}

	contested := cellsOf(t, page, "contested")[1:]
	// #, resource, route, stale refusals, mark.
	if len(contested) != 3 || fmt.Sprint(contested[0][:5]) != fmt.Sprint([]string{"1", "orders/1", "orders", "2", "5"}) {
		t.Errorf("contested table %q", contested)
	}

	j := statusJSON(t, a)
	for _, c := range []struct {
		steps []any
		want  any
	}{
		{[]any{"store", "kind"}, "memory"},
		{[]any{"store", "answering"}, true},
		{[]any{"store", "state"}, "ok"},
		{[]any{"store", "lost"}, false},
		{[]any{"store", "ready"}, true},
		{[]any{"rates", "windowSeconds"}, 20.0},
		{[]any{"rates", "routes", 0, "route"}, "default"}, // by name
		{[]any{"rates", "routes", 1, "route"}, "orders"},
		{[]any{"rates", "routes", 1, "dryRun"}, false},
		{[]any{"rates", "routes", 1, "decisions", 1, "decision"}, "stale"},
		{[]any{"rates", "routes", 1, "decisions", 1, "perSecond"}, 0.15},
		{[]any{"rates", "routes", 1, "decisions", 1, "total"}, 3.0},
		{[]any{"rates", "routes", 2, "dryRun"}, true},
		{[]any{"refusals", 2, "token"}, "8"}, // a string, not a number
		{[]any{"refusals", 2, "mark"}, "9"},
		{[]any{"refusals", 2, "resource"}, "orders/2"},
		{[]any{"contested", 0, "resource"}, "orders/1"},
		{[]any{"contested", 0, "mark"}, "5"},
		{[]any{"contested", 0, "stale"}, 2.0},
		{[]any{"config", 0, "name"}, "FENCE_STORE"},
	} {
		if got := path(t, j, c.steps...); got != c.want {
			t.Errorf("JSON %v = %#v, want %#v", c.steps, got, c.want)
		}
	}
}

func hasRow(rows [][]string, want []string) bool {
	for _, r := range rows {
		if fmt.Sprint(r) == fmt.Sprint(want) {
			return true
		}
	}
	return false
}

// What clients send (resource names, details) reaches the page escaped,
// and the page forbids scripts in any case.
func TestStatusEscapesClientText(t *testing.T) {
	m := NewMetrics()
	const evil = `<script>alert(1)</script>`
	rt := &route{name: "orders"}
	m.record(rt, decStale, &problem{Status: 409, Resource: evil, Token: "1", HighWaterMark: "2",
		Detail: `token 1 <img src=x onerror=alert(2)>`})
	a := NewAdmin(AdminOptions{Store: memstore.New(), Metrics: m,
		Config: func() []ConfigItem { return []ConfigItem{{Name: "x", Value: `"><script>alert(3)</script>`}} }})

	rec := serveAdmin(t, a, "GET", "/")
	page := rec.Body.String()
	for _, raw := range []string{"<script", "<img"} {
		if strings.Contains(page, raw) {
			t.Errorf("the page holds %q unescaped", raw)
		}
	}
	if n := strings.Count(page, "&lt;script&gt;alert(1)&lt;/script&gt;"); n != 2 { // refusals and contested
		t.Errorf("the resource appears escaped %d times, want 2", n)
	}
	if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("no CSP forbidding scripts: %q", rec.Header().Get("Content-Security-Policy"))
	}
	if got := path(t, statusJSON(t, a), "refusals", 0, "resource"); got != evil {
		t.Errorf("JSON resource %q, want it intact as %q", got, evil)
	}
}

// The rates are the growth since the oldest reading kept within the
// minute; readings are kept 10s apart and forgotten past the minute; with
// no earlier reading the rate is not known (0 window), not 0.
func TestStatusRatesWindow(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var n float64 // admitted requests of route r so far
	s := &rateSampler{now: clock.now, every: rateEvery, window: rateWindow, read: func() map[routeDecision]float64 {
		return map[routeDecision]float64{{"r", "admitted"}: n, {"r", "would_stale"}: 0}
	}}
	dryRun := func(string) (bool, bool) { return true, true }
	rates := func() rateTable { now, base := s.observe(); return buildRates(now, base, dryRun) }
	tab := rates()
	if tab.WindowSeconds != 0 || tab.Routes[0].Decisions[0].PerSecond != 0 {
		t.Fatalf("first reading: %+v", tab)
	}
	// 2 requests a second for 90s, a view every 5s: readings kept every 10s.
	for range 18 {
		clock.t = clock.t.Add(5 * time.Second)
		n += 10
		tab = rates()
	}
	if len(s.readings) > int(rateWindow/rateEvery)+1 {
		t.Errorf("%d readings kept, bound %d", len(s.readings), rateWindow/rateEvery+1)
	}
	if tab.WindowSeconds < 50 || tab.WindowSeconds > 60 {
		t.Errorf("window %vs, want the last minute", tab.WindowSeconds)
	}
	r := tab.Routes[0]
	if r.Route != "r" || !r.DryRun || r.Total != 180 || r.Decisions[0].Decision != "admitted" || r.Decisions[0].PerSecond != 2 {
		t.Errorf("after 90s at 2/s: %+v", r)
	}
	// Idle for a minute: the rate falls to 0, the total stays.
	for range 12 {
		clock.t = clock.t.Add(5 * time.Second)
		tab = rates()
	}
	if r := tab.Routes[0]; r.PerSecond != 0 || r.Total != 180 {
		t.Errorf("after an idle minute: %+v", r)
	}
	// Columns: admitted and stale always, would_stale on a dry-run route.
	if fmt.Sprint(tab.Decisions) != "[admitted stale would_stale]" {
		t.Errorf("columns %v", tab.Decisions)
	}
}

// The ticker keeps readings while the admin lives, and stops with its
// context.
func TestStatusSampleRatesStops(t *testing.T) {
	a := NewAdmin(AdminOptions{Store: memstore.New(), Metrics: NewMetrics()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.SampleRates(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.status.rates.mu.Lock()
		n := len(a.status.rates.readings)
		a.status.rates.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no reading taken at start")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("SampleRates did not return when its context ended")
	}
}

// The store section says what state the store is in and why (a store that
// does not answer, a store lost (the identity check), a failing check), and
// what /readyz answers: by default ready whatever the store's state, with
// ReadyRequiresStore only while it is ok; never while draining.
func TestStatusStoreHealthAgreesWithReadyz(t *testing.T) {
	for _, requires := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReadyRequiresStore=%v", requires), func(t *testing.T) {
			var checkErr error
			store := memstore.New()
			a := NewAdmin(AdminOptions{Store: store, StoreKind: "redis", ReadyRequiresStore: requires, Checks: []ReadinessCheck{
				func(context.Context) error { return nil },
				func(context.Context) error { return checkErr },
			}})
			lost := &fencestore.LostError{Want: "id-1", Found: "id-2"}
			tests := []struct {
				name              string
				prepare           func()
				state             StoreState
				answering, isLost bool
				draining          bool
				texts             []string // in the page
			}{
				{"healthy", func() {}, StoreOK, true, false, false, []string{"all 2 pass"}},
				{"failing check", func() { checkErr = errors.New("redis maxmemory-policy is allkeys-lru") }, StoreUnsafe, true, false, false,
					[]string{"allkeys-lru", "unsafe"}},
				{"lost", func() { checkErr = lost }, StoreLost, true, true, false, []string{"identity changed from id-1 to id-2"}},
				{"store closed, a check failing", func() { checkErr = errors.New("redis settings not checked yet"); _ = store.Close() },
					StoreDown, false, false, false, []string{"fence store: ", "redis settings not checked yet", "down"}},
				{"draining", func() { a.SetDraining() }, StoreDown, false, false, true, []string{"shutting down"}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					tt.prepare()
					ready := !tt.draining && (tt.state == StoreOK || !requires)
					j := statusJSON(t, a)
					st := path(t, j, "store").(map[string]any)
					if st["kind"] != "redis" || st["state"] != string(tt.state) || st["answering"] != tt.answering ||
						st["lost"] != tt.isLost || st["ready"] != ready || st["readyRequiresStore"] != requires {
						t.Errorf("store %v", st)
					}
					if got := serveAdmin(t, a, "GET", "/readyz").Code == 200; got != ready {
						t.Errorf("/readyz ready=%v, status says %v", got, ready)
					}
					page := serveAdmin(t, a, "GET", "/").Body.String()
					for _, text := range tt.texts {
						if !strings.Contains(page, text) {
							t.Errorf("page lacks %q", text)
						}
					}
				})
			}
		})
	}
}

// The mode column follows the table in force: a route switched from dry run
// to enforcing keeps its would_ series (at 0, or with what it counted) and
// shows as enforcing all the same; a route a reload removed shows as not in
// force; a route switched to dry run shows as one before it counts anything.
func TestStatusModeFollowsTheTableInForce(t *testing.T) {
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	m := NewMetrics()
	p, err := New(Options{Upstream: u, Routes: mustRoutes(t, statusRoutes), Store: memstore.New(), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAdmin(AdminOptions{Store: memstore.New(), Metrics: m})
	put := func(target, token string) {
		r := httptest.NewRequest("PUT", target, nil)
		r.Header.Set("Fencing-Token", token)
		p.ServeHTTP(httptest.NewRecorder(), r)
	}
	modes := func() map[string]string {
		out := map[string]string{}
		for _, row := range cellsOf(t, serveAdmin(t, a, "GET", "/").Body.String(), "rates")[1:] {
			out[row[0]] = row[1]
		}
		return out
	}
	put("/trial/1", "7")
	put("/trial/1", "6") // would_stale 1
	if got := modes(); got["trial"] != "dry run" || got["orders"] != "enforcing" {
		t.Fatalf("before the switch: %v", got)
	}
	for _, tt := range []struct {
		name, routes string
		want         map[string]string
	}{
		{"trial enforcing", strings.Replace(statusRoutes, "    enforce: false\n", "", 1),
			map[string]string{"trial": "enforcing", "orders": "enforcing", "default": "enforcing"}},
		{"orders dry run, trial removed", `
routes:
  - name: orders
    path: /orders/{id}
    resource: orders/{id}
    enforce: false
`, map[string]string{"trial": "not in force", "orders": "dry run", "default": "enforcing"}},
	} {
		if err := p.SetRoutes(mustRoutes(t, tt.routes)); err != nil {
			t.Fatal(err)
		}
		if got := modes(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: modes %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Only "/" and "/status.json" are new: another path is still 404, and the
// page is GET only.
func TestStatusRoutesOnlyExactPaths(t *testing.T) {
	a := NewAdmin(AdminOptions{Store: memstore.New(), Metrics: NewMetrics()})
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/", 200},
		{"GET", "/status.json", 200},
		{"GET", "/index.html", 404},
		{"GET", "/status", 404},
		{"GET", "/nope/", 404},
		{"GET", "/healthz", 200},
		{"POST", "/", 405},
	} {
		if got := serveAdmin(t, a, c.method, c.path).Code; got != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.code)
		}
	}
}

// No password reaches the page or the JSON, whichever store and variable
// carries it; the settings that matter are shown.
func TestStatusConfigRedactsSecrets(t *testing.T) {
	const pw = "Sup3r-Secret-Pw"
	keys := t.TempDir() + "/keys.json" // named only; StatusConfig does not read it
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // Name=Value items that must be shown
	}{
		{"redis URL", map[string]string{"FENCE_REDIS_URL": "redis://fence:" + pw + "@10.0.0.7:6379/2"},
			[]string{"FENCE_REDIS_URL=redis://fence:xxxxx@10.0.0.7:6379/2", "FENCE_STORE=redis"}},
		{"redis URL, password only", map[string]string{"FENCE_REDIS_URL": "rediss://:" + pw + "@redis:6380/0"},
			[]string{"FENCE_REDIS_URL=rediss://:xxxxx@redis:6380/0", "FENCE_REDIS_SETTINGS=(unset: read with CONFIG GET)",
				"FENCE_READY_REQUIRES_STORE=false"}},
		{"redis settings stated, ready requires the store", map[string]string{"FENCE_REDIS_URL": "redis://redis:6379/0",
			"FENCE_REDIS_SETTINGS": "appendonly=no,maxmemory-policy=noeviction", "FENCE_READY_REQUIRES_STORE": "true"},
			[]string{"FENCE_REDIS_SETTINGS=maxmemory-policy=noeviction,appendonly=no", "FENCE_READY_REQUIRES_STORE=true"}},
		{"sentinel", map[string]string{"FENCE_REDIS_SENTINEL_ADDRS": "s1:26379,s2:26379", "FENCE_REDIS_USERNAME": "fence",
			"FENCE_REDIS_PASSWORD": pw},
			[]string{"FENCE_REDIS_PASSWORD=(set)", "FENCE_REDIS_USERNAME=fence", "FENCE_REDIS_SENTINEL_ADDRS=s1:26379, s2:26379"}},
		{"etcd", map[string]string{"FENCE_STORE": "etcd", "FENCE_ETCD_ENDPOINTS": "https://e1:2379,e2:2379",
			"FENCE_ETCD_USERNAME": "fence", "FENCE_ETCD_PASSWORD": pw},
			[]string{"FENCE_ETCD_PASSWORD=(set)", "FENCE_ETCD_ENDPOINTS=https://e1:2379, e2:2379"}},
		{"bolt, signed tokens", map[string]string{"FENCE_TOKEN_KEYS_FILE": keys},
			[]string{"FENCE_UPSTREAM_URL=http://127.0.0.1:3000", "FENCE_STORE=bolt", "FENCE_BOLT_PATH=fenceproxy.db",
				"FENCE_TOKEN_KEYS_FILE=" + keys + ": signed tokens required; key ids in force: k1, k2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"FENCE_UPSTREAM_URL": "http://127.0.0.1:3000"}
			for k, v := range c.env {
				env[k] = v
			}
			cfg, err := config.Load(env)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := config.ParseRoutes([]byte(statusRoutes))
			if err != nil {
				t.Fatal(err)
			}
			items := StatusConfig(cfg, rs, []string{"k1", "k2"}, "v1.2.3")
			a := NewAdmin(AdminOptions{Store: memstore.New(), Metrics: NewMetrics(), StoreKind: string(cfg.Store),
				Config: func() []ConfigItem { return items }})
			page := serveAdmin(t, a, "GET", "/").Body.String()
			js := serveAdmin(t, a, "GET", "/status.json").Body.String()
			for where, text := range map[string]string{"page": page, "JSON": js} {
				if strings.Contains(text, pw) {
					t.Errorf("the %s shows the password", where)
				}
			}
			shown := map[string]string{}
			for _, it := range items {
				shown[it.Name+"="+it.Value] = it.Name
			}
			for _, w := range append(c.want, "version=v1.2.3", "FENCE_STORE_TIMEOUT=500ms",
				"route trial=POST,PUT,PATCH,DELETE /trial/{id} (case-insensitive) -> resource trial/{id}; compare >=; dry run (enforce: false)") {
				if _, ok := shown[w]; !ok {
					t.Errorf("config lacks %q; it has:\n%v", w, items)
				}
			}
		})
	}
}
