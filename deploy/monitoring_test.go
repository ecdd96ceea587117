package deploy

// The monitoring that ships with fenceproxy (monitoring/): the Prometheus
// alerting rules (alerts.yaml, and the same groups as a Prometheus Operator
// PrometheusRule in prometheusrule.yaml), the Grafana dashboard
// (grafana-dashboard.json) and the kustomization that applies both.
//
//   - The rules load with Prometheus's own rulefmt and PromQL parser, and
//     every alert carries a severity, a summary, a description and a runbook
//     that names a section of docs/operations.md.
//   - Every alert is evaluated over synthetic series as `promtool test rules`
//     does (promqltest's lazy loader, the rules manager's groups, one
//     evaluation a minute): a history that must fire after its `for`, and
//     histories that must not (normal traffic, a single blip).
//   - prometheusrule.yaml is alerts.yaml under a PrometheusRule header,
//     byte for byte (-update rewrites it), and decodes strictly into the
//     Prometheus Operator's monitoringv1.PrometheusRule with the same groups.
//   - The dashboard parses, every panel says what it answers, every query
//     uses the datasource variable and parses as PromQL.
//   - Every metric that a rule or a panel names exists on a running
//     fenceproxy's /metrics (the binary built from this repository, with
//     bolt, and with Redis when redis-server is there), with the labels and
//     label values the queries match on.
//
// Every check has a case that breaks it and expects the failure.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

var monUpdate = flag.Bool("update", false, "rewrite monitoring/prometheusrule.yaml from monitoring/alerts.yaml")

const (
	monDir           = "monitoring"
	monAlertsFile    = "monitoring/alerts.yaml"
	monRuleFile      = "monitoring/prometheusrule.yaml"
	monDashboardFile = "monitoring/grafana-dashboard.json"
	monOperationsDoc = "docs/operations.md" // under repoRoot
	// monDashboardConfigMap and monDashboardKey are what the kustomization
	// generates for Grafana's dashboard sidecar.
	monDashboardConfigMap = "fenceproxy-grafana-dashboard"
	monDashboardKey       = "fenceproxy.json"
)

// monParser is the PromQL parser of a stock Prometheus: no experimental
// functions or other syntax behind a feature flag.
var monParser = parser.NewParser(parser.Options{})

// monAlerts are the alerts the rules must define.
var monAlerts = []string{
	"FenceStoreUnavailable", "FenceStoreDown", "FenceStoreUnsafe", "FenceStoreLost", "FenceMarkRegressions", "FenceStaleSpike",
	"FenceDrainTimeouts", "FenceConfigReloadFailed", "FenceUpstreamErrors",
}

// monRouteFamilies are fenceproxy's metric families with a route label: the
// dashboard's queries of them must filter on the route variable
// (TestMetricsExistOnARunningProxy checks the list against /metrics).
var monRouteFamilies = []string{
	"fenceproxy_requests_total", "fenceproxy_admission_duration_seconds", "fenceproxy_upstream_errors_total",
	"fenceproxy_drain_total", "fenceproxy_drain_wait_seconds", "fenceproxy_mark_regressions_total",
	"fenceproxy_upstream_duration_seconds", "fenceproxy_upstream_responses_total", "fenceproxy_client_gone_total",
}

// monTargetLabels are labels Prometheus attaches to a scrape target (not on
// /metrics): queries may match and group on them.
var monTargetLabels = []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint"}

func monRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ---------------------------------------------------------------------------
// Rules

// monParseRules parses a rules file with Prometheus's rulefmt, as
// Prometheus and promtool load it (unknown fields refused, every expression
// parsed, every template parsed).
func monParseRules(data []byte) (*rulefmt.RuleGroups, error) {
	rgs, errs := rulefmt.Parse(data, false, model.LegacyValidation, monParser, promslog.NewNopLogger())
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rgs, nil
}

var monRunbookRE = regexp.MustCompile(`^docs/operations\.md#([a-z0-9-]+)$`)

// monCheckRules returns what is wrong with a rules file: it does not load,
// an alert is missing, a rule lacks `for`, a severity, a summary, a
// description or a runbook naming a section (anchors) of docs/operations.md.
func monCheckRules(data []byte, anchors map[string]bool) []string {
	rgs, err := monParseRules(data)
	if err != nil {
		return []string{"rulefmt: " + err.Error()}
	}
	// `for` as written: rulefmt cannot tell an absent `for` from 0s.
	var raw struct {
		Groups []struct {
			Rules []struct {
				Alert string  `json:"alert"`
				For   *string `json:"for"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := sigsyaml.Unmarshal(data, &raw); err != nil {
		return []string{err.Error()}
	}
	var probs []string
	seen := map[string]bool{}
	for gi, g := range rgs.Groups {
		for ri, r := range g.Rules {
			if r.Alert == "" {
				probs = append(probs, fmt.Sprintf("group %s: rule %d is not an alert", g.Name, ri))
				continue
			}
			bad := func(format string, args ...any) {
				probs = append(probs, r.Alert+": "+fmt.Sprintf(format, args...))
			}
			if seen[r.Alert] {
				bad("defined twice")
			}
			seen[r.Alert] = true
			if raw.Groups[gi].Rules[ri].For == nil {
				bad("no `for`: say how long the condition must hold, 0m included")
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				bad("severity label %q, want critical or warning", s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					bad("no %s annotation", a)
				}
			}
			if rb := r.Annotations["runbook"]; rb != "" {
				m := monRunbookRE.FindStringSubmatch(rb)
				switch {
				case m == nil:
					bad("runbook %q is not docs/operations.md#<anchor>", rb)
				case !anchors[m[1]]:
					bad("runbook %q: docs/operations.md has no heading with the anchor %q", rb, m[1])
				}
			}
			expr, err := monParser.ParseExpr(r.Expr)
			if err != nil {
				bad("expr: %v", err)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && monSelectorName(vs) == "" {
					bad("selector %s names no metric", vs)
				}
				return nil
			})
		}
	}
	for _, a := range monAlerts {
		if !seen[a] {
			probs = append(probs, a+": not defined")
		}
	}
	return probs
}

func TestRulesLoadWithPrometheus(t *testing.T) {
	data := monRead(t, monAlertsFile)
	anchors := monAnchors(readRepoFile(t, monOperationsDoc))
	if probs := monCheckRules(data, anchors); len(probs) > 0 {
		t.Errorf("%s:\n  %s", monAlertsFile, strings.Join(probs, "\n  "))
	}
	// The same file through the path Prometheus itself loads rule files by.
	if _, errs := rulefmt.ParseFile(monAlertsFile, false, model.LegacyValidation, monParser, promslog.NewNopLogger()); len(errs) > 0 {
		t.Errorf("rulefmt.ParseFile: %v", errors.Join(errs...))
	}
}

func TestRuleChecksCanFail(t *testing.T) {
	data := string(monRead(t, monAlertsFile))
	anchors := monAnchors(readRepoFile(t, monOperationsDoc))
	for _, tc := range []struct{ name, old, new, want string }{
		{"bad PromQL", "fenceproxy_store_lost == 1", "fenceproxy_store_lost == == 1", "parse error"},
		{"experimental function", "fenceproxy_store_lost == 1", "sort_by_label(fenceproxy_store_lost, \"instance\") == 1", "is not enabled"},
		{"unknown field", "        for: 1m\n", "        for: 1m\n        fro: 1m\n", "field fro not found"},
		{"no for", "        for: 1m\n", "", "no `for`"},
		{"no severity", "          severity: critical\n        annotations:\n          summary: \"fenceproxy {{ $labels.instance }}: the mark", "          tier: one\n        annotations:\n          summary: \"fenceproxy {{ $labels.instance }}: the mark", "FenceStoreDown: severity"},
		{"runbook elsewhere", "runbook: docs/operations.md#fencestorelost", "runbook: https://example.com/fencestorelost", "is not docs/operations.md"},
		{"runbook to no heading", "runbook: docs/operations.md#fencestorelost", "runbook: docs/operations.md#fencestorelots", "no heading with the anchor"},
		{"alert renamed", "alert: FenceDrainTimeouts", "alert: FenceDrainTimeout", "FenceDrainTimeouts: not defined"},
		{"bad template", "{{ $labels.route }}: admitted", "{{ $labels.route }: admitted", "template"},
		{"selector without a name", "fenceproxy_store_lost == 1", "{instance=\"a\"} == 1", "names no metric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(data, tc.old) {
				t.Fatalf("%s does not contain %q", monAlertsFile, tc.old)
			}
			probs := monCheckRules([]byte(strings.Replace(data, tc.old, tc.new, 1)), anchors)
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("want a problem containing %q, got %q", tc.want, probs)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Alerts over synthetic series

// monFiring is one firing alert at one evaluation.
type monFiring struct {
	alert       string
	labels      map[string]string
	annotations map[string]string
}

// monEvalAlerts evaluates the rule file's groups once a minute from 0 to
// until over the series (the body of a promqltest `load 1m` command), the
// way `promtool test rules` does, and returns the alerts firing at each
// evaluation.
func monEvalAlerts(ruleFile, series string, until time.Duration) (map[time.Duration][]monFiring, error) {
	const interval = time.Minute
	ll, err := promqltest.NewLazyLoader("load 1m\n"+series, promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: monParser,
	})
	if err != nil {
		return nil, fmt.Errorf("series: %w", err)
	}
	defer ll.Close()
	ll.SubqueryInterval = interval
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:            rules.EngineQueryFunc(ll.QueryEngine(), ll.Storage()),
		AppendableV2:         ll.Storage(),
		Context:              context.Background(),
		NotifyFunc:           func(context.Context, string, ...*rules.Alert) {},
		Logger:               promslog.NewNopLogger(),
		Parser:               monParser,
		NameValidationScheme: model.LegacyValidation,
	})
	groups, errs := m.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, ruleFile)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true)
			}
		}
	}
	out := map[time.Duration][]monFiring{}
	start := time.Unix(0, 0).UTC()
	for at := time.Duration(0); at <= until; at += interval {
		var evalErr error
		ll.WithSamplesTill(start.Add(at), func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			for _, g := range groups {
				g.Eval(ll.Context(), start.Add(at))
				for _, r := range g.Rules() {
					if err := r.LastError(); err != nil {
						evalErr = errors.Join(evalErr, fmt.Errorf("%s at %v: %w", r.Name(), at, err))
					}
				}
			}
		})
		if evalErr != nil {
			return nil, evalErr
		}
		for _, g := range groups {
			for _, r := range g.Rules() {
				ar, ok := r.(*rules.AlertingRule)
				if !ok {
					continue
				}
				for _, a := range ar.ActiveAlerts() {
					if a.State == rules.StateFiring {
						out[at] = append(out[at], monFiring{alert: ar.Name(), labels: a.Labels.Map(), annotations: a.Annotations.Map()})
					}
				}
			}
		}
	}
	return out, nil
}

// monAlertCase is a series history and what one alert must do over it.
type monAlertCase struct {
	name   string
	alert  string
	series string
	// fireAt: the alert must be firing at each of these evaluations, with
	// labels (a subset); quietAt: it must not be firing at these.
	fireAt  []time.Duration
	quietAt []time.Duration
	labels  map[string]string
	// never: it must not fire at any evaluation up to until.
	never bool
	until time.Duration
}

func (c monAlertCase) end() time.Duration {
	end := c.until
	for _, d := range append(slices.Clone(c.fireAt), c.quietAt...) {
		end = max(end, d)
	}
	return max(end, 30*time.Minute)
}

// monCheckAlertCase evaluates the case against a rule file and returns
// what went against it.
func monCheckAlertCase(ruleFile string, c monAlertCase) []string {
	fired, err := monEvalAlerts(ruleFile, c.series, c.end())
	if err != nil {
		return []string{err.Error()}
	}
	firing := func(at time.Duration) []monFiring {
		var fs []monFiring
		for _, f := range fired[at] {
			if f.alert == c.alert {
				fs = append(fs, f)
			}
		}
		return fs
	}
	var probs []string
	for _, at := range c.fireAt {
		fs := firing(at)
		if len(fs) == 0 {
			probs = append(probs, fmt.Sprintf("not firing at %v", at))
			continue
		}
		for _, f := range fs {
			for k, v := range c.labels {
				if f.labels[k] != v {
					probs = append(probs, fmt.Sprintf("firing at %v with %s=%q, want %q (labels %v)", at, k, f.labels[k], v, f.labels))
				}
			}
			for k, v := range f.annotations {
				if strings.Contains(v, "<error expanding template") || strings.Contains(v, "<no value>") {
					probs = append(probs, fmt.Sprintf("annotation %s at %v: %s", k, at, v))
				}
			}
		}
	}
	for _, at := range c.quietAt {
		if fs := firing(at); len(fs) > 0 {
			probs = append(probs, fmt.Sprintf("firing at %v: %v", at, fs[0].labels))
		}
	}
	if c.never {
		for at := time.Duration(0); at <= c.end(); at += time.Minute {
			if fs := firing(at); len(fs) > 0 {
				probs = append(probs, fmt.Sprintf("firing at %v: %v", at, fs[0].labels))
				break
			}
		}
	}
	return probs
}

// Series of one route of one replica; counters count per minute (a
// `load 1m` step): 600 a minute is 10 requests/s.
const (
	monReq   = `fenceproxy_requests_total{job="app", instance="p1:9090", route="orders", decision="%s"}`
	monReq2  = `fenceproxy_requests_total{job="app", instance="p2:9090", route="orders", decision="%s"}`
	monDrain = `fenceproxy_drain_total{job="app", instance="p1:9090", route="orders", outcome="%s"}`
	monResp  = `fenceproxy_upstream_responses_total{job="app", instance="p1:9090", route="orders", class="%s"}`
	monUpErr = `fenceproxy_upstream_errors_total{job="app", instance="p1:9090", route="orders"}`
	monRel   = `fenceproxy_config_last_reload_successful{job="app", instance="p1:9090", file="routes"}`
)

func monSeries(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func monLine(format, label, values string) string {
	if strings.Contains(format, "%s") {
		return fmt.Sprintf(format, label) + " " + values
	}
	return format + " " + values
}

var monMin = time.Minute

var monAlertCases = []monAlertCase{
	// FenceStoreUnavailable: 10 requests/s; from minute 10 every fenced
	// request is refused 503.
	{name: "store down for 20 minutes", alert: "FenceStoreUnavailable",
		series: monSeries(
			monLine(monReq, "admitted", "0+600x10 6000+0x20"),
			monLine(monReq, "unavailable", "0x10 600+600x20"),
			monLine(monReq, "stale", "0x30"),
			monLine(monReq, "unfenced", "0+600x30")),
		quietAt: []time.Duration{13 * monMin}, fireAt: []time.Duration{20 * monMin, 30 * monMin},
		labels: map[string]string{"instance": "p1:9090", "job": "app", "severity": "critical"}},
	{name: "store down on a dry-run route", alert: "FenceStoreUnavailable",
		series: monSeries(
			monLine(monReq, "admitted", "0+600x10 6000+0x20"),
			monLine(monReq, "would_unavailable", "0x10 600+600x20")),
		fireAt: []time.Duration{20 * monMin}},
	{name: "one minute of 503s (a failover)", alert: "FenceStoreUnavailable", never: true,
		series: monSeries(
			monLine(monReq, "admitted", "0+600x10 6000+0x0 6600+600x20"),
			monLine(monReq, "unavailable", "0x10 600+0x20"))},
	{name: "normal traffic, one 503 in a thousand", alert: "FenceStoreUnavailable", never: true,
		series: monSeries(
			monLine(monReq, "admitted", "0+600x30"),
			monLine(monReq, "unavailable", "0+0.6x30"))},
	{name: "no fenced traffic", alert: "FenceStoreUnavailable", never: true,
		series: monSeries(
			monLine(monReq, "admitted", "0x30"),
			monLine(monReq, "unavailable", "0x30"),
			monLine(monReq, "unfenced", "0+600x30"))},

	// FenceStoreDown: fenceproxy_store_up, one sample a minute.
	{name: "store down from minute 5", alert: "FenceStoreDown",
		series: monSeries(
			`fenceproxy_store_up{job="app", instance="p1:9090"} 1x5 0x25`,
			`fenceproxy_store_up{job="app", instance="p2:9090"} 1x30`),
		quietAt: []time.Duration{6 * monMin}, fireAt: []time.Duration{8 * monMin, 30 * monMin},
		labels: map[string]string{"instance": "p1:9090", "job": "app", "severity": "critical"}},
	{name: "a one-minute failover", alert: "FenceStoreDown", never: true,
		series: monSeries(`fenceproxy_store_up{job="app", instance="p1:9090"} 1x5 0x1 1x24`)},
	{name: "store up", alert: "FenceStoreDown", never: true,
		series: monSeries(`fenceproxy_store_up{job="app", instance="p1:9090"} 1x30`)},

	// FenceStoreUnsafe: fenceproxy_store_state, every state a series.
	{name: "an evicting policy from minute 5", alert: "FenceStoreUnsafe",
		series: monSeries(
			`fenceproxy_store_state{job="app", instance="p1:9090", state="ok"} 1x5 0x25`,
			`fenceproxy_store_state{job="app", instance="p1:9090", state="unsafe"} 0x5 1x25`,
			`fenceproxy_store_state{job="app", instance="p1:9090", state="down"} 0x30`),
		quietAt: []time.Duration{8 * monMin}, fireAt: []time.Duration{11 * monMin, 30 * monMin},
		labels: map[string]string{"instance": "p1:9090", "state": "unsafe", "severity": "critical"}},
	{name: "store down, not unsafe", alert: "FenceStoreUnsafe", never: true,
		series: monSeries(
			`fenceproxy_store_state{job="app", instance="p1:9090", state="unsafe"} 0x30`,
			`fenceproxy_store_state{job="app", instance="p1:9090", state="down"} 1x30`)},
	{name: "fixed within two minutes", alert: "FenceStoreUnsafe", never: true,
		series: monSeries(`fenceproxy_store_state{job="app", instance="p1:9090", state="unsafe"} 0x5 1x2 0x23`)},

	// FenceStoreLost
	{name: "identity record lost at minute 5", alert: "FenceStoreLost",
		series:  monSeries(`fenceproxy_store_lost{job="app", instance="p1:9090"} 0x5 1x25`),
		quietAt: []time.Duration{5 * monMin}, fireAt: []time.Duration{8 * monMin, 30 * monMin},
		labels: map[string]string{"instance": "p1:9090", "severity": "critical"}},
	{name: "store intact", alert: "FenceStoreLost", never: true,
		series: monSeries(`fenceproxy_store_lost{job="app", instance="p1:9090"} 0x30`)},

	// FenceMarkRegressions
	{name: "one mark healed at minute 11", alert: "FenceMarkRegressions",
		series: monSeries(
			`fenceproxy_mark_regressions_total{job="app", instance="p1:9090", route="orders"} 0x10 1x20`,
			`fenceproxy_mark_regressions_total{job="app", instance="p2:9090", route="orders"} 0x30`),
		quietAt: []time.Duration{10 * monMin, 25 * monMin}, fireAt: []time.Duration{11 * monMin, 15 * monMin},
		labels: map[string]string{"job": "app", "severity": "warning"}},
	{name: "no regressions", alert: "FenceMarkRegressions", never: true,
		series: monSeries(`fenceproxy_mark_regressions_total{job="app", instance="p1:9090", route="orders"} 0x30`)},
	{name: "a replica restarted (counter reset)", alert: "FenceMarkRegressions", never: true,
		series: monSeries(`fenceproxy_mark_regressions_total{job="app", instance="p1:9090", route="orders"} 3x10 0x20`)},

	// FenceStaleSpike: 10 admissions/s.
	{name: "stale writes at 2/s from minute 10", alert: "FenceStaleSpike",
		series: monSeries(
			monLine(monReq, "admitted", "0+600x40"),
			monLine(monReq, "stale", "0x10 120+120x30")),
		quietAt: []time.Duration{15 * monMin}, fireAt: []time.Duration{25 * monMin, 40 * monMin},
		labels: map[string]string{"route": "orders", "job": "app", "severity": "warning"}},
	{name: "stale writes spread over two replicas", alert: "FenceStaleSpike",
		series: monSeries(
			monLine(monReq, "admitted", "0+300x40"),
			monLine(monReq2, "admitted", "0+300x40"),
			monLine(monReq, "stale", "0x10 60+60x30"),
			monLine(monReq2, "stale", "0x10 60+60x30")),
		fireAt: []time.Duration{25 * monMin}, labels: map[string]string{"route": "orders"}},
	{name: "a busy route's usual 1% stale", alert: "FenceStaleSpike", never: true,
		series: monSeries(
			monLine(monReq, "admitted", "0+6000x40"),
			monLine(monReq, "stale", "0+60x40"))},
	{name: "a quiet route's few stale writes (below the rate floor)", alert: "FenceStaleSpike", never: true,
		series: monSeries(
			monLine(monReq, "admitted", "0+6x40"),
			monLine(monReq, "stale", "0+1x40"))},
	{name: "a single burst of stale writes", alert: "FenceStaleSpike", never: true,
		series: monSeries(
			monLine(monReq, "admitted", "0+600x40"),
			monLine(monReq, "stale", "0x10 600+0x30"))},

	// FenceDrainTimeouts
	{name: "a drain timeout every minute from minute 5", alert: "FenceDrainTimeouts",
		series: monSeries(
			monLine(monDrain, "none", "0+600x30"),
			monLine(monDrain, "timeout", "0x5 1+1x25")),
		quietAt: []time.Duration{10 * monMin}, fireAt: []time.Duration{20 * monMin},
		labels: map[string]string{"route": "orders", "severity": "warning"}},
	{name: "a single drain timeout", alert: "FenceDrainTimeouts", never: true,
		series: monSeries(
			monLine(monDrain, "none", "0+600x30"),
			monLine(monDrain, "timeout", "0x5 1+0x25"))},
	{name: "waits and expired waits, no timeout", alert: "FenceDrainTimeouts", never: true,
		series: monSeries(
			monLine(monDrain, "waited", "0+60x30"),
			monLine(monDrain, "expired", "0+1x30"),
			monLine(monDrain, "timeout", "0x30"))},

	// FenceConfigReloadFailed: the gauge is 1 while the last reload put the
	// file in force, 0 while it failed.
	{name: "an invalid file at minute 11, never fixed", alert: "FenceConfigReloadFailed",
		series:  monSeries(monLine(monRel, "", "1x10 0x50")),
		quietAt: []time.Duration{13 * monMin}, fireAt: []time.Duration{20 * monMin, 60 * monMin},
		labels: map[string]string{"file": "routes", "instance": "p1:9090", "severity": "warning"}},
	{name: "a good reload, then an invalid one", alert: "FenceConfigReloadFailed",
		series:  monSeries(monLine(monRel, "", "1x20 0x40")),
		quietAt: []time.Duration{15 * monMin}, fireAt: []time.Duration{30 * monMin}},
	{name: "an invalid file fixed two minutes later", alert: "FenceConfigReloadFailed", never: true, until: 60 * monMin,
		series: monSeries(monLine(monRel, "", "1x10 0 0 1x48"))},
	{name: "good reloads only", alert: "FenceConfigReloadFailed", never: true,
		series: monSeries(monLine(monRel, "", "1x40"))},
	{name: "the replica with the invalid file is gone", alert: "FenceConfigReloadFailed",
		series: monSeries(monLine(monRel, "", "1x10 0x10")),
		fireAt: []time.Duration{18 * monMin}, quietAt: []time.Duration{30 * monMin, 60 * monMin}},

	// FenceUpstreamErrors: 10 forwards/s.
	{name: "10% 5xx from minute 5", alert: "FenceUpstreamErrors",
		series: monSeries(
			monLine(monResp, "2xx", "0+600x5 3000+540x30"),
			monLine(monResp, "5xx", "0x5 60+60x30"),
			monLine(monUpErr, "", "0x35")),
		quietAt: []time.Duration{10 * monMin}, fireAt: []time.Duration{20 * monMin},
		labels: map[string]string{"route": "orders", "job": "app", "severity": "warning"}},
	{name: "the upstream is down: 502s, no responses at all", alert: "FenceUpstreamErrors",
		series: monSeries(monLine(monUpErr, "", "0+60x35")),
		fireAt: []time.Duration{20 * monMin}, labels: map[string]string{"route": "orders"}},
	{name: "a usual 1% of 5xx", alert: "FenceUpstreamErrors", never: true,
		series: monSeries(
			monLine(monResp, "2xx", "0+594x35"),
			monLine(monResp, "5xx", "0+6x35"),
			monLine(monUpErr, "", "0x35"))},
	{name: "a quiet route's few 5xx (below the rate floor)", alert: "FenceUpstreamErrors", never: true,
		series: monSeries(
			monLine(monResp, "2xx", "0+6x35"),
			monLine(monResp, "5xx", "0+1x35"),
			monLine(monUpErr, "", "0x35"))},
	{name: "4xx are the clients'", alert: "FenceUpstreamErrors", never: true,
		series: monSeries(
			monLine(monResp, "2xx", "0+300x35"),
			monLine(monResp, "4xx", "0+300x35"),
			monLine(monUpErr, "", "0x35"))},
}

func TestAlertsFireOverSyntheticSeries(t *testing.T) {
	// Each alert has a history that fires and one that must not.
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, c := range monAlertCases {
		if len(c.fireAt) > 0 {
			fires[c.alert] = true
		}
		if c.never || len(c.quietAt) > 0 {
			quiet[c.alert] = true
		}
	}
	for _, a := range monAlerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("%s: want a case that fires and one that does not (fires: %v, quiet: %v)", a, fires[a], quiet[a])
		}
	}
	for _, c := range monAlertCases {
		t.Run(c.alert+"/"+c.name, func(t *testing.T) {
			t.Parallel()
			if probs := monCheckAlertCase(monAlertsFile, c); len(probs) > 0 {
				t.Errorf("%s:\n  %s", c.alert, strings.Join(probs, "\n  "))
			}
		})
	}
}

// TestAlertCasesCanFail breaks one alert at a time and expects its cases to
// notice: a threshold too high, a `for` dropped, a metric misspelled, a
// filter removed.
func TestAlertCasesCanFail(t *testing.T) {
	data := monRead(t, monAlertsFile)
	for _, tc := range []struct {
		name, alert string
		edit        func(expr string) string
		forTo       *model.Duration
		wantFailing []string // cases of the alert that must now fail
	}{
		{name: "stale threshold 0.5", alert: "FenceStaleSpike",
			edit:        func(e string) string { return strings.Replace(e, ") > 0.1", ") > 0.5", 1) },
			wantFailing: []string{"stale writes at 2/s from minute 10"}},
		{name: "stale without the rate floor", alert: "FenceStaleSpike",
			edit:        func(e string) string { return e[:strings.Index(e, "and")] },
			wantFailing: []string{"a quiet route's few stale writes (below the rate floor)"}},
		{name: "store unavailable without for", alert: "FenceStoreUnavailable", forTo: new(model.Duration),
			wantFailing: []string{"one minute of 503s (a failover)", "store down for 20 minutes"}},
		{name: "store lost misspelled", alert: "FenceStoreLost",
			edit:        func(e string) string { return strings.Replace(e, "fenceproxy_store_lost", "fenceproxy_store_lots", 1) },
			wantFailing: []string{"identity record lost at minute 5"}},
		{name: "store down without for", alert: "FenceStoreDown", forTo: new(model.Duration),
			wantFailing: []string{"a one-minute failover"}},
		{name: "store unsafe on the wrong state", alert: "FenceStoreUnsafe",
			edit:        func(e string) string { return strings.Replace(e, `state="unsafe"`, `state="down"`, 1) },
			wantFailing: []string{"an evicting policy from minute 5", "store down, not unsafe"}},
		{name: "reload alert without for", alert: "FenceConfigReloadFailed", forTo: new(model.Duration),
			wantFailing: []string{"an invalid file fixed two minutes later"}},
		{name: "reload alert that never forgets a failure", alert: "FenceConfigReloadFailed",
			edit: func(e string) string {
				return `max_over_time((fenceproxy_config_last_reload_successful == 0)[1h:1m])`
			},
			wantFailing: []string{"an invalid file fixed two minutes later"}},
		{name: "upstream errors without the 502s", alert: "FenceUpstreamErrors",
			edit: func(e string) string {
				return `sum without (instance, pod, class) (rate(fenceproxy_upstream_responses_total{class="5xx"}[5m])) / sum without (instance, pod, class) (rate(fenceproxy_upstream_responses_total[5m])) > 0.05`
			},
			wantFailing: []string{"the upstream is down: 502s, no responses at all"}},
		{name: "regressions over one route only", alert: "FenceMarkRegressions",
			edit: func(e string) string {
				return strings.Replace(e, "fenceproxy_mark_regressions_total", `fenceproxy_mark_regressions_total{instance="p2:9090"}`, 1)
			},
			wantFailing: []string{"one mark healed at minute 11"}},
		{name: "drain timeouts without for", alert: "FenceDrainTimeouts", forTo: new(model.Duration),
			wantFailing: []string{"a single drain timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rgs rulefmt.RuleGroups
			if err := yaml.Unmarshal(data, &rgs); err != nil {
				t.Fatal(err)
			}
			found := false
			for gi := range rgs.Groups {
				for ri := range rgs.Groups[gi].Rules {
					r := &rgs.Groups[gi].Rules[ri]
					if r.Alert != tc.alert {
						continue
					}
					found = true
					if tc.edit != nil {
						r.Expr = tc.edit(r.Expr)
					}
					if tc.forTo != nil {
						r.For = *tc.forTo
					}
				}
			}
			if !found {
				t.Fatalf("no alert %s", tc.alert)
			}
			out, err := yaml.Marshal(&rgs)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "broken.yaml")
			if err := os.WriteFile(file, out, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, name := range tc.wantFailing {
				i := slices.IndexFunc(monAlertCases, func(c monAlertCase) bool { return c.alert == tc.alert && c.name == name })
				if i < 0 {
					t.Fatalf("no case %q of %s", name, tc.alert)
				}
				if probs := monCheckAlertCase(file, monAlertCases[i]); len(probs) == 0 {
					t.Errorf("case %q passed against the broken rule", name)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// The PrometheusRule

// monPrometheusRule is prometheusrule.yaml: alerts.yaml's groups (its
// leading comment left out) under a PrometheusRule header.
func monPrometheusRule(alerts []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`# The rules of alerts.yaml as a Prometheus Operator PrometheusRule.
# Generated: edit alerts.yaml, then run
#   cd deploy && go test -run TestPrometheusRule -update
# (the deploy tests fail while the two differ). docs/operations.md says what
# each alert means and what to do. Your Prometheus selects PrometheusRules by
# label (Prometheus.spec.ruleSelector): add the labels it wants, e.g. with
# the kustomization beside this file.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: fenceproxy
  labels:
    app.kubernetes.io/name: fenceproxy
    app.kubernetes.io/component: monitoring
spec:
`)
	sc := bufio.NewScanner(bytes.NewReader(alerts))
	header := true
	for sc.Scan() {
		line := sc.Text()
		if header && (strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "") {
			continue
		}
		header = false
		if line != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// monRuleGroupsEqual compares the PrometheusRule's groups with the rule
// file's, field by field.
func monRuleGroupsEqual(pr *monitoringv1.PrometheusRule, rgs *rulefmt.RuleGroups) []string {
	var probs []string
	if len(pr.Spec.Groups) != len(rgs.Groups) {
		return []string{fmt.Sprintf("%d groups, alerts.yaml has %d", len(pr.Spec.Groups), len(rgs.Groups))}
	}
	dur := func(d *monitoringv1.Duration) model.Duration {
		if d == nil {
			return 0
		}
		v, err := model.ParseDuration(string(*d))
		if err != nil {
			probs = append(probs, err.Error())
		}
		return v
	}
	for i, g := range pr.Spec.Groups {
		want := rgs.Groups[i]
		if g.Name != want.Name || dur(g.Interval) != want.Interval || len(g.Rules) != len(want.Rules) {
			probs = append(probs, fmt.Sprintf("group %d: %s, interval %v, %d rules; alerts.yaml: %s, %v, %d", i, g.Name, dur(g.Interval), len(g.Rules), want.Name, want.Interval, len(want.Rules)))
			continue
		}
		for j, r := range g.Rules {
			w := want.Rules[j]
			if r.Alert != w.Alert || r.Record != w.Record || r.Expr.String() != w.Expr || dur(r.For) != w.For ||
				!maps.Equal(r.Labels, w.Labels) || !maps.Equal(r.Annotations, w.Annotations) {
				probs = append(probs, fmt.Sprintf("group %s rule %d (%s) differs from alerts.yaml", g.Name, j, w.Alert))
			}
		}
	}
	return probs
}

func monCheckPrometheusRule(doc []byte, rgs *rulefmt.RuleGroups) []string {
	o, err := DecodeYAML(doc)
	if err != nil {
		return []string{"strict decoding: " + err.Error()}
	}
	pr, ok := o.Obj.(*monitoringv1.PrometheusRule)
	if !ok {
		return []string{fmt.Sprintf("%s is not a PrometheusRule", o)}
	}
	return monRuleGroupsEqual(pr, rgs)
}

func TestPrometheusRuleIsTheAlertsFile(t *testing.T) {
	alerts := monRead(t, monAlertsFile)
	want := monPrometheusRule(alerts)
	if *monUpdate {
		if err := os.WriteFile(monRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := monRead(t, monRuleFile)
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not %s under its header: run `cd deploy && go test -run TestPrometheusRule -update`", monRuleFile, monAlertsFile)
	}
	rgs, err := monParseRules(alerts)
	if err != nil {
		t.Fatal(err)
	}
	if probs := monCheckPrometheusRule(got, rgs); len(probs) > 0 {
		t.Errorf("%s:\n  %s", monRuleFile, strings.Join(probs, "\n  "))
	}
	// Broken: strict decoding, and the groups compared.
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown field", "  groups:\n", "  groupz: []\n  groups:\n", "unknown field"},
		{"another expr", "fenceproxy_store_lost == 1", "fenceproxy_store_lost == 0", "differs from alerts.yaml"},
		{"another for", "for: 1m", "for: 2m", "differs from alerts.yaml"},
		{"old API version", "monitoring.coreos.com/v1", "monitoring.coreos.com/v1alpha1", "unknown kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := bytes.Replace(want, []byte(tc.old), []byte(tc.new), 1)
			if bytes.Equal(doc, want) {
				t.Fatalf("%q not found", tc.old)
			}
			probs := monCheckPrometheusRule(doc, rgs)
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("want a problem containing %q, got %q", tc.want, probs)
			}
		})
	}
}

// TestMonitoringKustomization renders monitoring/ as `kubectl kustomize`
// does: the PrometheusRule and the dashboard's ConfigMap for Grafana's
// sidecar, holding the dashboard file as it is.
func TestMonitoringKustomization(t *testing.T) {
	m, err := Build(monDir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(m)
	if err != nil {
		t.Fatalf("strict decoding:\n%v", err)
	}
	var cm *corev1.ConfigMap
	var pr *monitoringv1.PrometheusRule
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.ConfigMap:
			cm = v
		case *monitoringv1.PrometheusRule:
			pr = v
		default:
			t.Errorf("unexpected object %s", o)
		}
	}
	if cm == nil || pr == nil {
		t.Fatalf("want a ConfigMap and a PrometheusRule, got %v", objs)
	}
	if cm.Name != monDashboardConfigMap || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s labels %v: want %s labelled grafana_dashboard=1 (the sidecar's default)", cm.Name, cm.Labels, monDashboardConfigMap)
	}
	if got, want := cm.Data[monDashboardKey], string(monRead(t, monDashboardFile)); got != want {
		t.Errorf("ConfigMap key %s is not %s", monDashboardKey, monDashboardFile)
	}
	rgs, err := monParseRules(monRead(t, monAlertsFile))
	if err != nil {
		t.Fatal(err)
	}
	if probs := monRuleGroupsEqual(pr, rgs); len(probs) > 0 {
		t.Errorf("PrometheusRule:\n  %s", strings.Join(probs, "\n  "))
	}
	if err := Check(objs).Err(); err != nil {
		t.Errorf("checks: %v", err)
	}
}

// ---------------------------------------------------------------------------
// The dashboard

type monDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type monPanel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *monDatasource `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *monDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []monPanel `json:"panels"` // a collapsed row's
}

type monDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *monDatasource  `json:"datasource"`
			AllValue   string          `json:"allValue"`
			IncludeAll bool            `json:"includeAll"`
			Multi      bool            `json:"multi"`
		} `json:"list"`
	} `json:"templating"`
	Panels []monPanel `json:"panels"`
}

// monDatasourceVar is how a panel names the dashboard's datasource variable.
const monDatasourceVar = "${datasource}"

// monGrafanaVars stand in for Grafana's variables so that a panel's query
// parses as PromQL: the range macros by durations, the dashboard's own
// variables (all of them in regex matchers) by ".*".
var monGrafanaVars = map[string]string{
	"__rate_interval": "5m", "__range": "1h", "__interval": "1m",
	"namespace": ".*", "route": ".*",
}

var monGrafanaVarRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)\}|\$([A-Za-z0-9_]+)`)

// monGrafanaSubst replaces the variables of a query (see monGrafanaVars);
// an unknown one is an error.
func monGrafanaSubst(q string) (string, error) {
	var unknown []string
	out := monGrafanaVarRE.ReplaceAllStringFunc(q, func(v string) string {
		m := monGrafanaVarRE.FindStringSubmatch(v)
		name := m[1] + m[2]
		if val, ok := monGrafanaVars[name]; ok {
			return val
		}
		unknown = append(unknown, v)
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variable %v in %s", unknown, q)
	}
	return out, nil
}

// monPanels flattens the panels, a collapsed row's included.
func monPanels(ps []monPanel) []monPanel {
	var out []monPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, monPanels(p.Panels)...)
	}
	return out
}

// monDashboardQueries returns every PromQL query of the dashboard, by
// where it is, with Grafana's variables replaced (see monGrafanaVars); the
// variables' label_values(...) queries give their selector.
func monDashboardQueries(d *monDashboard) (map[string]string, []string) {
	qs := map[string]string{}
	var probs []string
	for _, p := range monPanels(d.Panels) {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			q, err := monGrafanaSubst(tg.Expr)
			if err != nil {
				probs = append(probs, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			qs[where] = q
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				probs = append(probs, fmt.Sprintf("variable %s: query %s", v.Name, v.Query))
				continue
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			probs = append(probs, fmt.Sprintf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query))
			continue
		}
		sel, err := monGrafanaSubst(m[1])
		if err != nil {
			probs = append(probs, fmt.Sprintf("variable %s: %v", v.Name, err))
			continue
		}
		qs[fmt.Sprintf("variable %s", v.Name)] = sel
	}
	return qs, probs
}

// monCheckDashboard returns what is wrong with the dashboard.
func monCheckDashboard(data []byte) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	// Strict JSON: a key twice is an error (encoding/json keeps the last).
	var generic map[string]any
	strict, err := sigsjson.UnmarshalStrict(data, &generic)
	if err != nil {
		return []string{"JSON: " + err.Error()}
	}
	for _, e := range strict {
		bad("JSON: %v", e)
	}
	var d monDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return append(probs, "JSON: "+err.Error())
	}
	if d.UID == "" || d.Title == "" {
		bad("no uid or title")
	}
	if d.SchemaVersion < 36 {
		bad("schemaVersion %d: want 36 or later (datasource references by uid)", d.SchemaVersion)
	}
	// A key over 256 KiB does not fit in the last-applied annotation of
	// `kubectl apply` (client side).
	if len(data) > 256<<10 {
		bad("%d bytes: the ConfigMap would not apply with kubectl apply", len(data))
	}
	vars := map[string]int{}
	for i, v := range d.Templating.List {
		vars[v.Name] = i
	}
	if i, ok := vars["datasource"]; !ok {
		bad("no datasource variable")
	} else if v := d.Templating.List[i]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		bad("variable datasource: type %q query %s, want a datasource variable of type prometheus", v.Type, v.Query)
	}
	if i, ok := vars["route"]; !ok {
		bad("no route variable")
	} else if v := d.Templating.List[i]; v.Type != "query" || !v.IncludeAll || !v.Multi || v.AllValue != ".*" {
		bad("variable route: want a multi-value query variable with All as .*")
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != monDatasourceVar) {
			bad("variable %s: datasource %v, want uid %s", v.Name, v.Datasource, monDatasourceVar)
		}
	}
	ids, titles := map[int]string{}, map[string]bool{}
	type rect struct {
		title      string
		x, y, w, h int
	}
	var rects []rect
	for _, p := range monPanels(d.Panels) {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup {
			bad("%s: id %d already used by %q", name, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			bad("%s: no title", name)
		} else if titles[p.Title] {
			bad("%s: title used twice (docs/operations.md describes panels by title)", name)
		}
		titles[p.Title] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			bad("%s: gridPos %+v outside the 24 columns", name, g)
		}
		for _, r := range rects {
			if g.X < r.x+r.w && r.x < g.X+g.W && g.Y < r.y+r.h && r.y < g.Y+g.H {
				bad("%s overlaps %q", name, r.title)
			}
		}
		rects = append(rects, rect{p.Title, g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			continue
		}
		if strings.TrimSpace(p.Description) == "" {
			bad("%s: no description (the question it answers)", name)
		}
		if p.Datasource == nil || p.Datasource.UID != monDatasourceVar || p.Datasource.Type != "prometheus" {
			bad("%s: datasource %v, want {prometheus %s}", name, p.Datasource, monDatasourceVar)
		}
		if len(p.Targets) == 0 {
			bad("%s: no query", name)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] {
				bad("%s: refId %s twice", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != monDatasourceVar {
				bad("%s query %s: datasource %v, want uid %s", name, tg.RefID, tg.Datasource, monDatasourceVar)
			}
		}
	}
	qs, qprobs := monDashboardQueries(&d)
	probs = append(probs, qprobs...)
	for _, where := range slices.Sorted(maps.Keys(qs)) {
		q := qs[where]
		expr, err := monParser.ParseExpr(q)
		if err != nil {
			bad("%s: %v", where, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := monSelectorName(vs)
			if name == "" {
				bad("%s: selector %s names no metric", where, vs)
				return nil
			}
			if !strings.HasPrefix(where, "panel") {
				return nil
			}
			if slices.Contains(monRouteFamilies, monFamily(name)) && !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
				return m.Name == "route" && m.Type == labels.MatchRegexp && m.Value == ".*"
			}) {
				bad("%s: %s does not filter on the route variable (route=~\"$route\")", where, vs)
			}
			return nil
		})
	}
	return probs
}

func TestDashboard(t *testing.T) {
	if probs := monCheckDashboard(monRead(t, monDashboardFile)); len(probs) > 0 {
		t.Errorf("%s:\n  %s", monDashboardFile, strings.Join(probs, "\n  "))
	}
}

func TestDashboardChecksCanFail(t *testing.T) {
	data := string(monRead(t, monDashboardFile))
	first := func(re string) string {
		m := regexp.MustCompile(re).FindString(data)
		if m == "" {
			t.Fatalf("%s does not match %s", monDashboardFile, re)
		}
		return m
	}
	desc := first(`"description": "Is fencing refusing what it should\?[^"]*",`)
	for _, tc := range []struct {
		name, old, new, want string
		all                  bool // replace every occurrence
	}{
		{"no description", desc, `"description": "",`, "no description", false},
		{"datasource by name", `"uid": "${datasource}"`, `"uid": "prometheus"`, "want {prometheus ${datasource}}", true},
		{"id twice", first(`"id": 3,`), `"id": 2,`, "already used", false},
		{"bad PromQL", "sum by (route) (rate(", "sum by (route) (rate((", "parse error", false},
		{"no route filter", `decision=\"stale\"}[$__rate_interval]))`, `decision=\"stale\"}[$__rate_interval])) + sum(fenceproxy_upstream_errors_total)`, "does not filter on the route variable", false},
		{"unknown variable", `route=~\"$route\"`, `route=~\"$routes\"`, "unknown variable", false},
		{"duplicate key", `"schemaVersion": 39,`, `"schemaVersion": 39, "schemaVersion": 38,`, "duplicate field", false},
		{"overlap", first(`"x": 12,\s*"y": 6`), `"x": 8, "y": 6`, "overlaps", false},
		{"no route variable", `"name": "route"`, `"name": "routes"`, "no route variable", false},
		{"title twice", `"title": "Stale refusals per route"`, `"title": "Decisions by route"`, "title used twice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(data, tc.old) {
				t.Fatalf("%q not found", tc.old)
			}
			n := 1
			if tc.all {
				n = -1
			}
			probs := monCheckDashboard([]byte(strings.Replace(data, tc.old, tc.new, n)))
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("want a problem containing %q, got %q", tc.want, probs)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// docs/operations.md

// monAnchors returns the anchors GitHub gives the headings of a Markdown
// document: lower case, punctuation but '-' and '_' dropped, spaces to '-',
// a repeated heading suffixed -1, -2, ...
func monAnchors(doc []byte) map[string]bool {
	anchors := map[string]bool{}
	count := map[string]int{}
	fence := false
	for line := range strings.SplitSeq(string(doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := count[a]; n > 0 {
			count[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			count[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// monSection returns the text of the level-2 section titled title.
func monSection(doc, title string) string {
	_, rest, ok := strings.Cut(doc, "\n## "+title+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// monCheckOperationsDoc: the document has a Dashboard and an Alerts
// section; the first names every panel of the dashboard, the second has a
// heading per alert.
func monCheckOperationsDoc(doc []byte, d *monDashboard, alerts []string) []string {
	var probs []string
	dash, al := monSection(string(doc), "Dashboard"), monSection(string(doc), "Alerts")
	if dash == "" || al == "" {
		return []string{"want the sections ## Dashboard and ## Alerts"}
	}
	for _, p := range monPanels(d.Panels) {
		if p.Type != "row" && !strings.Contains(dash, "**"+p.Title+"**") {
			probs = append(probs, fmt.Sprintf("Dashboard: panel %q is not described (as **%s**)", p.Title, p.Title))
		}
	}
	for _, a := range alerts {
		if !strings.Contains(al, "\n### "+a+"\n") {
			probs = append(probs, fmt.Sprintf("Alerts: no heading ### %s", a))
		}
	}
	return probs
}

func TestOperationsDoc(t *testing.T) {
	doc := readRepoFile(t, monOperationsDoc)
	var d monDashboard
	if err := json.Unmarshal(monRead(t, monDashboardFile), &d); err != nil {
		t.Fatal(err)
	}
	if probs := monCheckOperationsDoc(doc, &d, monAlerts); len(probs) > 0 {
		t.Errorf("%s:\n  %s", monOperationsDoc, strings.Join(probs, "\n  "))
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"panel not described", "**Most contested routes**", "**Most contested**", "Most contested routes"},
		{"alert heading missing", "### FenceDrainTimeouts\n", "### Drain timeouts\n", "FenceDrainTimeouts"},
		{"no alerts section", "\n## Alerts\n", "\n## Alerting\n", "## Alerts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := bytes.Replace(doc, []byte(tc.old), []byte(tc.new), 1)
			if bytes.Equal(broken, doc) {
				t.Fatalf("%q not found", tc.old)
			}
			probs := monCheckOperationsDoc(broken, &d, monAlerts)
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("want a problem containing %q, got %q", tc.want, probs)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Metric names against a running fenceproxy

// monSelectorName is the metric a selector names ("" if none).
func monSelectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// monFamily is the metric family of a series name: a histogram's or
// summary's _bucket, _sum and _count series belong to the family without
// the suffix. (A counter's family keeps its _total.)
func monFamily(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok {
			return base
		}
	}
	return name
}

// monUse is what the queries ask of one series name.
type monUse struct {
	where    []string
	matchers []*labels.Matcher
	// grouping: labels named in by/without/on/ignoring next to it
	grouping []string
}

// monQueriedMetrics returns every series name that the rules and the
// dashboard name, with the label matchers and the grouping labels used
// around it.
func monQueriedMetrics(t *testing.T) map[string]*monUse {
	t.Helper()
	rgs, err := monParseRules(monRead(t, monAlertsFile))
	if err != nil {
		t.Fatal(err)
	}
	qs := map[string]string{}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			qs["alert "+r.Alert] = r.Expr
		}
	}
	var d monDashboard
	if err := json.Unmarshal(monRead(t, monDashboardFile), &d); err != nil {
		t.Fatal(err)
	}
	dqs, probs := monDashboardQueries(&d)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	maps.Copy(qs, dqs)
	uses := map[string]*monUse{}
	for where, q := range qs {
		expr, err := monParser.ParseExpr(q)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := monSelectorName(vs)
			u := uses[name]
			if u == nil {
				u = &monUse{}
				uses[name] = u
			}
			u.where = append(u.where, where)
			u.matchers = append(u.matchers, vs.LabelMatchers...)
			// The grouping labels of the innermost aggregation and vector
			// matching around the selector.
			for i := len(path) - 1; i >= 0; i-- {
				switch e := path[i].(type) {
				case *parser.AggregateExpr:
					u.grouping = append(u.grouping, e.Grouping...)
					i = -1
				case *parser.BinaryExpr:
					if e.VectorMatching != nil {
						u.grouping = append(u.grouping, e.VectorMatching.MatchingLabels...)
					}
				}
			}
			return nil
		})
	}
	return uses
}

// monRunningProxy is a fenceproxy process started by a test.
type monRunningProxy struct {
	cmd         *exec.Cmd
	data, admin string // base URLs
	logs        *monBuffer
}

type monBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *monBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *monBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// monStartProxy runs bin with env (and no other FENCE_* variable) on
// loopback ports of its own choosing, reads them from its "listening" log
// line, and waits for /readyz. The process is stopped by its PID (SIGTERM,
// then SIGKILL) when the test ends.
func monStartProxy(t *testing.T, bin string, env map[string]string) *monRunningProxy {
	t.Helper()
	full := map[string]string{
		"FENCE_LISTEN_ADDR": "127.0.0.1:0",
		"FENCE_ADMIN_ADDR":  "127.0.0.1:0",
		"FENCE_LOG_LEVEL":   "info",
	}
	maps.Copy(full, env)
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range full {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &monRunningProxy{cmd: cmd, logs: &monBuffer{}}
	cmd.Stderr = p.logs
	cmd.Stdout = p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		pid := cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("fenceproxy (pid %d) logs:\n%s", pid, p.logs)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for p.admin == "" {
		select {
		case <-exited:
			t.Fatalf("fenceproxy exited at start:\n%s", p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line within 20s:\n%s", p.logs)
		}
		for line := range strings.SplitSeq(p.logs.String(), "\n") {
			var l struct{ Msg, Addr, Admin string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && !strings.HasSuffix(l.Admin, ":0") {
				p.data, p.admin = "http://"+l.Addr, "http://"+l.Admin
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		resp, err := http.Get(p.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 20s (%v):\n%s", err, p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

func (p *monRunningProxy) do(t *testing.T, method, path, token string) int {
	t.Helper()
	req, err := http.NewRequest(method, p.data+path, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// traffic sends requests that make every family and label value the
// queries match on appear: each decision of an enforced and of a dry-run
// route, each response class the rules name, and a wait at the drain
// barrier.
func (p *monRunningProxy) traffic(t *testing.T) {
	t.Helper()
	for _, r := range []struct {
		method, path, token string
		want                int
	}{
		{"PUT", "/orders/1", "5", 200},
		{"PUT", "/orders/1", "4", 409},     // stale
		{"PUT", "/orders/1", "", 428},      // missing
		{"PUT", "/orders/1", "x1", 400},    // malformed
		{"PUT", "/orders/500", "1", 500},   // the upstream's 5xx
		{"PUT", "/orders/404", "1", 404},   // 4xx
		{"GET", "/orders/1", "", 200},      // unfenced
		{"PUT", "/dry/1", "5", 200},        // dry run: admitted
		{"PUT", "/dry/1", "4", 200},        // would_stale, forwarded
		{"PUT", "/dry/1", "", 200},         // would_missing
		{"PUT", "/orders/01", "1", 400},    // bad_request: not a canonical number
		{"PUT", "/nowhere/1", "1", 200},    // the default rule
		{"DELETE", "/orders/2", "9", 200},  // another resource
		{"PATCH", "/orders/404", "2", 404}, // 4xx again
	} {
		if got := p.do(t, r.method, r.path, r.token); got != r.want {
			t.Errorf("%s %s token %q: %d, want %d", r.method, r.path, r.token, got, r.want)
		}
	}
	// The drain barrier: token 10 is held at the upstream while 11 for the
	// same resource is admitted, and waits.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.do(t, "PUT", "/orders/7", "10")
	}()
	time.Sleep(100 * time.Millisecond)
	p.do(t, "PUT", "/orders/7", "11")
	wg.Wait()
}

// scrape returns the families of the proxy's /metrics.
func (p *monRunningProxy) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

const monRoutes = `routes:
  - name: orders
    path: /orders/{orderID:uint}
    resource: orders/{orderID}
  - name: orders-dry-run
    path: /dry/{orderID:uint}
    resource: dry/{orderID}
    enforce: false
`

// monBuild builds fenceproxy from the repository's own module (its go.mod,
// not this module's), as `make build` does.
func monBuild(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fenceproxy")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/fenceproxy")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fenceproxy: %v\n%s", err, out)
	}
	return bin
}

// monRedisOnly are the families a proxy shows only with Redis; the test
// finds them on a Redis-backed proxy, or lets them be missing when Redis
// tests are skipped (FENCE_SKIP_REDIS=1 without redis-server).
var monRedisOnly = map[string]string{
	"fenceproxy_redis_master_changes_total":   "registered only with Redis (not Cluster): the master watch",
	"fenceproxy_redis_master":                 "registered only with Redis (not Cluster): the master watch",
	"fenceproxy_drain_releases_dropped_total": "registered only with Redis and etcd: the releases sent again",
}

// monMetricProblems compares what the queries use with the families
// scraped: a name that is not there, a label the family does not have, a
// label value that none of its series has (equality), or that no series
// matches (regex); a fenceproxy family that no panel shows; the route
// families that monRouteFamilies does not list, or lists wrongly.
func monMetricProblems(uses map[string]*monUse, fams map[string]*dto.MetricFamily, optional map[string]string) []string {
	var probs []string
	labelValues := func(f *dto.MetricFamily) map[string]map[string]bool {
		lv := map[string]map[string]bool{}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if lv[l.GetName()] == nil {
					lv[l.GetName()] = map[string]bool{}
				}
				lv[l.GetName()][l.GetValue()] = true
			}
		}
		return lv
	}
	shown := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(uses)) {
		u := uses[name]
		where := strings.Join(slices.Compact(slices.Sorted(slices.Values(u.where))), "; ")
		f, ok := fams[name]
		suffixed := false
		if !ok {
			f, ok = fams[monFamily(name)]
			suffixed = ok
		}
		if !ok {
			if _, opt := optional[monFamily(name)]; opt {
				continue
			}
			probs = append(probs, fmt.Sprintf("%s: not on /metrics (%s)", name, where))
			continue
		}
		if suffixed && f.GetType() != dto.MetricType_HISTOGRAM && f.GetType() != dto.MetricType_SUMMARY {
			probs = append(probs, fmt.Sprintf("%s: %s is a %s, not a histogram (%s)", name, f.GetName(), f.GetType(), where))
		}
		if strings.HasSuffix(name, "_bucket") && f.GetType() != dto.MetricType_HISTOGRAM {
			probs = append(probs, fmt.Sprintf("%s: %s is not a histogram (%s)", name, f.GetName(), where))
		}
		shown[f.GetName()] = true
		lv := labelValues(f)
		known := func(l string) bool {
			return lv[l] != nil || slices.Contains(monTargetLabels, l) || l == labels.MetricName ||
				l == "le" && strings.HasSuffix(name, "_bucket") || l == "quantile" && f.GetType() == dto.MetricType_SUMMARY
		}
		for _, m := range u.matchers {
			if m.Name == labels.MetricName || slices.Contains(monTargetLabels, m.Name) {
				continue
			}
			if !known(m.Name) {
				probs = append(probs, fmt.Sprintf("%s: no label %s (%s)", name, m.Name, where))
				continue
			}
			switch m.Type {
			case labels.MatchEqual:
				if m.Value != "" && !lv[m.Name][m.Value] {
					probs = append(probs, fmt.Sprintf("%s: no series with %s (%s)", name, m, where))
				}
			case labels.MatchRegexp:
				if !slices.ContainsFunc(slices.Collect(maps.Keys(lv[m.Name])), m.Matches) {
					probs = append(probs, fmt.Sprintf("%s: no series matches %s (%s)", name, m, where))
				}
			}
		}
		for _, l := range slices.Compact(slices.Sorted(slices.Values(u.grouping))) {
			if !known(l) {
				probs = append(probs, fmt.Sprintf("%s: grouped by or matched on %s, which it does not have (%s)", name, l, where))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		f := fams[name]
		if !strings.HasPrefix(name, "fenceproxy_") {
			continue
		}
		if !shown[name] {
			probs = append(probs, fmt.Sprintf("%s: on /metrics, but no panel or rule shows it", name))
		}
		hasRoute := labelValues(f)["route"] != nil
		if hasRoute != slices.Contains(monRouteFamilies, name) {
			probs = append(probs, fmt.Sprintf("%s: route label %v, but monRouteFamilies says %v", name, hasRoute, !hasRoute))
		}
	}
	return probs
}

// TestMetricsExistOnARunningProxy builds fenceproxy, runs it on bolt with a
// routes file that has an enforced and a dry-run route (and on Redis, for
// the Redis-only families), sends requests through it to an upstream of
// the test, and checks every metric the rules and the dashboard name
// against what /metrics shows.
func TestMetricsExistOnARunningProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fenceproxy; skipped with -short")
	}
	uses := monQueriedMetrics(t)
	bin := monBuild(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/orders/500":
			w.WriteHeader(http.StatusInternalServerError)
		case "/orders/404":
			w.WriteHeader(http.StatusNotFound)
		case "/orders/7":
			time.Sleep(400 * time.Millisecond) // held, so that a newer token waits at the barrier
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer upstream.Close()
	dir := t.TempDir()
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(monRoutes), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"FENCE_UPSTREAM_URL": upstream.URL,
		"FENCE_ROUTES_FILE":  routes,
	}
	fams := map[string]*dto.MetricFamily{}
	merge := func(more map[string]*dto.MetricFamily) {
		for name, f := range more {
			if g, ok := fams[name]; ok {
				g.Metric = append(g.Metric, f.Metric...)
			} else {
				fams[name] = f
			}
		}
	}
	bolt := maps.Clone(env)
	bolt["FENCE_STORE"] = "bolt"
	bolt["FENCE_BOLT_PATH"] = filepath.Join(dir, "fenceproxy.db")
	p := monStartProxy(t, bin, bolt)
	p.traffic(t)
	merge(p.scrape(t))

	optional := maps.Clone(monRedisOnly)
	redisRan := false
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t) // skips with FENCE_SKIP_REDIS=1 when redis-server is missing
		redisRan = true
		re := maps.Clone(env)
		re["FENCE_STORE"] = "redis"
		re["FENCE_REDIS_URL"] = srv.URL()
		p := monStartProxy(t, bin, re)
		p.traffic(t)
		more := p.scrape(t)
		for name, why := range monRedisOnly {
			if more[name] == nil {
				t.Errorf("%s (%s): not on a Redis-backed proxy's /metrics", name, why)
			}
		}
		merge(more)
	})
	if redisRan && !t.Failed() {
		optional = nil // every family must then be there
	} else {
		for _, name := range slices.Sorted(maps.Keys(optional)) {
			t.Logf("%s may be missing: no Redis-backed proxy ran, and it is %s", name, optional[name])
		}
	}
	if probs := monMetricProblems(uses, fams, optional); len(probs) > 0 {
		t.Errorf("the rules and the dashboard against /metrics:\n  %s", strings.Join(probs, "\n  "))
	}

	// Broken: a misspelled metric, label and value, and a wrong histogram.
	for _, tc := range []struct{ name, query, want string }{
		{"misspelled metric", `rate(fenceproxy_request_total[5m])`, "not on /metrics"},
		{"misspelled label", `fenceproxy_drain_total{outcomes="timeout"}`, "no label outcomes"},
		{"misspelled value", `fenceproxy_drain_total{outcome="timeouts"}`, `no series with outcome="timeouts"`},
		{"regex matching nothing", `fenceproxy_requests_total{decision=~"would_admit.*"}`, "no series matches"},
		{"bucket of a counter", `fenceproxy_requests_total_bucket`, "not a histogram"},
		{"count of a counter", `fenceproxy_upstream_errors_count`, "not on /metrics"},
		{"grouped by a label it lacks", `sum by (class) (fenceproxy_drain_total)`, "grouped by or matched on class"},
		{"not shown", ``, "no panel or rule shows it"},
	} {
		t.Run("broken/"+tc.name, func(t *testing.T) {
			broken := maps.Clone(uses)
			if tc.query == "" {
				delete(broken, "fenceproxy_store_lost")
			} else {
				expr, err := monParser.ParseExpr(tc.query)
				if err != nil {
					t.Fatal(err)
				}
				parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
					if vs, ok := n.(*parser.VectorSelector); ok {
						u := &monUse{where: []string{"broken"}, matchers: vs.LabelMatchers}
						if len(path) > 0 {
							if a, ok := path[len(path)-1].(*parser.AggregateExpr); ok {
								u.grouping = a.Grouping
							}
						}
						broken[monSelectorName(vs)] = u
					}
					return nil
				})
			}
			probs := monMetricProblems(broken, fams, optional)
			if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("want a problem containing %q, got %q", tc.want, probs)
			}
		})
	}
}
