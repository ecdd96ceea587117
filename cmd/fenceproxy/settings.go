package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
)

// defaultSettingsEvery is how often the Redis settings are checked again
// besides at start and after a change of server (a restart or failover
// seen by masterWatch): how long a setting fixed by CONFIG SET takes to end a
// refusal, and how long a setting broken by CONFIG SET takes to start one.
const defaultSettingsEvery = 5 * time.Second

// settingsRetry is the period of the check while Redis does not answer it,
// so that a refusal for want of a check ends soon after Redis answers.
const settingsRetry = time.Second

// settingsPolicy is what FENCE_REDIS_EVICTION and FENCE_REDIS_PERSISTENCE
// ask of Redis's settings.
type settingsPolicy struct {
	eviction    config.Eviction
	persistence config.Persistence
	// stated are the settings FENCE_REDIS_SETTINGS states: judged instead
	// of the server's when it refuses CONFIG GET.
	stated config.RedisSettings
}

func (p settingsPolicy) enabled() bool {
	return p.eviction != config.EvictionOff || p.persistence != config.PersistenceOff
}

func (p settingsPolicy) refuses() bool {
	return p.eviction == config.EvictionRefuse || p.persistence == config.PersistenceRefuse
}

// finding is the verdict of one check (eviction or persistence) on one
// reading of the settings.
type finding struct {
	check string // "eviction" or "persistence"
	// setting is its variable and value, as "FENCE_REDIS_EVICTION=refuse".
	setting string
	refuse  bool // the variable says refuse
	ok      bool
	// text says what is right or wrong, naming the Redis setting. It holds
	// no address: a refusal's is shown to clients.
	text  string
	nodes []string // the cluster masters at fault, if a cluster
	// err is the server's refusal of the settings this check reads (CONFIG
	// GET refused), nil when it read them.
	err error
	// stated: judged on FENCE_REDIS_SETTINGS, not on settings read.
	stated bool
}

// level is how check --connect reports f.
func (f finding) level() string {
	switch {
	case f.ok:
		return "ok"
	case f.refuse:
		return "FAILED"
	}
	return "warning"
}

// judge weighs the settings of every node (or readErr: the server answered
// but refused CONFIG GET) against p, one finding per check p enables. When
// the server refuses, the settings FENCE_REDIS_SETTINGS states are judged
// in their place; when it answers, a statement that differs from what it
// says is one more finding (a warning: the settings read count).
func (p settingsPolicy) judge(nodes []redisstore.Settings, readErr error) []finding {
	var out []finding
	stated := []redisstore.Settings{{MaxmemoryPolicy: p.stated.MaxmemoryPolicy, AppendOnly: p.stated.AppendOnly, AppendFsync: p.stated.AppendFsync}}
	const asStated = " (as FENCE_REDIS_SETTINGS states it: the server refuses CONFIG GET, so fenceproxy did not read it)"
	if p.eviction != config.EvictionOff {
		f := finding{check: "eviction", setting: "FENCE_REDIS_EVICTION=" + string(p.eviction),
			refuse: p.eviction == config.EvictionRefuse, err: refusalOf(readErr, "maxmemory-policy")}
		judged := nodes
		switch {
		case readErr != nil && p.stated.MaxmemoryPolicy != "":
			judged, f.stated = stated, true
		case readErr != nil:
			f.text = "cannot read Redis maxmemory-policy: the server refuses CONFIG GET (as managed services often do), " +
				"so an eviction of marks cannot be ruled out; " + advice("FENCE_REDIS_EVICTION", f.refuse, "the policy cannot evict")
		}
		if f.text == "" {
			f.text, f.nodes = risks(judged, redisstore.Settings.EvictionRisk)
			if f.text == "" {
				f.ok, f.text = true, "Redis maxmemory-policy "+values(judged, func(s redisstore.Settings) string {
					return s.MaxmemoryPolicy
				})+" cannot evict marks"
			}
			if f.stated {
				f.text += asStated
			}
		}
		out = append(out, f)
	}
	if p.persistence != config.PersistenceOff {
		f := finding{check: "persistence", setting: "FENCE_REDIS_PERSISTENCE=" + string(p.persistence),
			refuse: p.persistence == config.PersistenceRefuse, err: refusalOf(readErr, "appendonly", "appendfsync")}
		judged := nodes
		switch {
		case readErr != nil && p.stated.AppendOnly != "":
			judged, f.stated = stated, true
		case readErr != nil:
			f.text = "cannot read Redis appendonly and appendfsync: the server refuses CONFIG GET (as managed services often do), " +
				"so a loss of acknowledged marks in a crash cannot be ruled out; " +
				advice("FENCE_REDIS_PERSISTENCE", f.refuse, "every write is on disk before Redis answers")
		}
		if f.text == "" {
			f.text, f.nodes = risks(judged, redisstore.Settings.PersistenceRisk)
			if f.text == "" {
				f.ok, f.text = true, "Redis appendonly yes, appendfsync always: every acknowledged mark is on disk"
			}
			if f.stated {
				f.text += asStated
			}
		}
		out = append(out, f)
	}
	if readErr == nil && p.stated.Stated() {
		if diff := statedDiff(p.stated, nodes); diff != "" {
			out = append(out, finding{check: "stated settings", setting: "FENCE_REDIS_SETTINGS=" + p.stated.String(),
				text: "FENCE_REDIS_SETTINGS differs from what Redis reports (" + diff + "); the settings Redis reports count"})
		}
	}
	return out
}

// refusalOf is the server's refusal of the named settings within readErr
// (nil if it refused none of them, or answered), so that a check quotes only
// the settings it is about.
func refusalOf(readErr error, names ...string) error {
	var refused *redisstore.RefusedError
	if errors.As(readErr, &refused) {
		return refused.For(names...)
	}
	return readErr
}

// statedDiff lists, for each node, each stated setting that differs from
// the one read: "appendfsync stated always, read everysec". "" if none.
func statedDiff(stated config.RedisSettings, nodes []redisstore.Settings) string {
	var diffs []string
	for _, n := range nodes {
		for _, d := range [][3]string{
			{"maxmemory-policy", stated.MaxmemoryPolicy, n.MaxmemoryPolicy},
			{"appendonly", stated.AppendOnly, n.AppendOnly},
			{"appendfsync", stated.AppendFsync, n.AppendFsync},
		} {
			if d[1] == "" || d[1] == d[2] {
				continue
			}
			diff := d[0] + " stated " + d[1] + ", read " + d[2]
			if n.Node != "" {
				diff += " on " + n.Node
			}
			if !slices.Contains(diffs, diff) {
				diffs = append(diffs, diff)
			}
		}
	}
	return strings.Join(diffs, "; ")
}

// advice says what to set when the settings cannot be read.
func advice(variable string, refuse bool, what string) string {
	if refuse {
		return "set " + variable + "=warn (or off) if you know " + what
	}
	return "set " + variable + "=off once you know " + what
}

// risks returns each distinct risk among nodes, prefixed with "Redis " and,
// for a cluster, followed by how many masters run it; and the nodes at
// fault. "" when no node has a risk.
func risks(nodes []redisstore.Settings, risk func(redisstore.Settings) string) (string, []string) {
	var order []string
	count := map[string]int{}
	var bad []string
	for _, n := range nodes {
		r := risk(n)
		if r == "" {
			continue
		}
		if count[r] == 0 {
			order = append(order, r)
		}
		count[r]++
		if n.Node != "" {
			bad = append(bad, n.Node)
		}
	}
	parts := make([]string, len(order))
	for i, r := range order {
		parts[i] = "Redis " + r
		if len(nodes) > 1 {
			parts[i] += fmt.Sprintf(", on %d of %d masters", count[r], len(nodes))
		}
	}
	return strings.Join(parts, "; "), bad
}

// values lists the distinct values of one setting among nodes.
func values(nodes []redisstore.Settings, get func(redisstore.Settings) string) string {
	var out []string
	for _, n := range nodes {
		if v := get(n); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return strings.Join(out, ", ")
}

// settingsWatch checks Redis's settings at start, every `every`, and
// whenever poked (masterWatch pokes it when the server behind the store
// changes), and applies the verdict: warnings are logged once per change,
// and a refusal is put in force on guard (nil when no check says refuse)
// until a check finds the settings safe. A check that Redis does not answer
// leaves the last verdict in force.
type settingsWatch struct {
	read    func(context.Context) ([]redisstore.Settings, error)
	policy  settingsPolicy
	guard   *guardedStore
	log     *zap.Logger
	every   time.Duration
	timeout time.Duration
	recheck chan struct{}

	checked bool   // a check got an answer; touched by one goroutine at a time
	logged  string // the findings last logged, so that each change is logged once
}

func newSettingsWatch(read func(context.Context) ([]redisstore.Settings, error), p settingsPolicy,
	store fencestore.Store, log *zap.Logger, every, timeout time.Duration) *settingsWatch {
	if every <= 0 {
		every = defaultSettingsEvery
	}
	w := &settingsWatch{read: read, policy: p, log: log, every: every, timeout: timeout,
		recheck: make(chan struct{}, 1)}
	if p.refuses() {
		// Fail closed until the first check: a Redis that did not answer
		// at start may answer with settings that lose marks.
		w.guard = &guardedStore{Store: store}
		var vars []string
		if p.eviction == config.EvictionRefuse {
			vars = append(vars, "FENCE_REDIS_EVICTION=refuse")
		}
		if p.persistence == config.PersistenceRefuse {
			vars = append(vars, "FENCE_REDIS_PERSISTENCE=refuse")
		}
		w.guard.unsafe.Store(&fencestore.UnsafeError{Reason: "Redis settings not checked yet: Redis has not answered " +
			"since fenceproxy started (" + strings.Join(vars, ", ") + ")"})
	}
	return w
}

// poke asks for a check now; it never blocks.
func (w *settingsWatch) poke() {
	select {
	case w.recheck <- struct{}{}:
	default:
	}
}

// run checks until ctx ends.
func (w *settingsWatch) run(ctx context.Context) {
	t := time.NewTimer(w.period())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.recheck:
			t.Stop()
		}
		w.check(ctx)
		t.Reset(w.period())
	}
}

func (w *settingsWatch) period() time.Duration {
	if !w.checked && settingsRetry < w.every {
		return settingsRetry
	}
	return w.every
}

// check reads the settings once and applies the verdict.
func (w *settingsWatch) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	nodes, err := w.read(cctx)
	if errors.Is(err, fencestore.ErrUnavailable) {
		if ce := w.log.Check(zap.DebugLevel, "redis settings not checked: redis does not answer"); ce != nil {
			ce.Write(zap.Error(err))
		}
		return
	}
	w.checked = true
	w.apply(w.policy.judge(nodes, err))
}

// apply puts the refusal, if any, in force, and logs the verdict when it
// differs from the last one logged.
func (w *settingsWatch) apply(fs []finding) {
	var reasons, key []string
	for _, f := range fs {
		if f.ok && !f.stated {
			continue
		}
		key = append(key, f.setting+": "+f.text)
		if f.ok {
			continue
		}
		if f.refuse {
			reasons = append(reasons, f.text+" ("+f.setting+")")
		}
	}
	if w.guard != nil {
		r := strings.Join(reasons, "; ")
		switch u := w.guard.unsafe.Load(); {
		case r == "":
			w.guard.unsafe.Store(nil)
		case u == nil || u.Reason != r:
			w.guard.unsafe.Store(&fencestore.UnsafeError{Reason: r})
		}
	}
	k := strings.Join(key, "\n")
	if k == w.logged {
		return
	}
	if k == "" {
		w.log.Info("redis settings: every check passes again")
	}
	w.logged = k
	for _, f := range fs {
		if f.ok {
			if f.stated {
				// Said once per change, so that nobody takes the
				// verdict for a reading.
				w.log.Info(f.setting+": settings asserted, not read: "+f.text, zap.Error(f.err))
			}
			continue
		}
		var fields []zap.Field
		if len(f.nodes) > 0 {
			fields = append(fields, zap.Strings("nodes", f.nodes))
		}
		if f.err != nil {
			fields = append(fields, zap.Error(f.err))
		}
		if f.refuse {
			w.log.Error(f.setting+": refusing every fenced request (503): "+f.text, fields...)
		} else {
			w.log.Warn(f.setting+": "+f.text, fields...)
		}
	}
}
