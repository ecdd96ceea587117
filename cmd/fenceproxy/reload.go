package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/filewatch"
)

// reloader re-reads one configuration file (the routes file, the keys file)
// and puts it in force: on change (a Kubernetes ConfigMap or Secret update
// is a symlink swap in the file's directory; a plain edit or rename is seen
// too) and on SIGHUP. A file that does not parse keeps the old one in force:
// logged with every problem and counted, never a restart, and /readyz stays
// 200 (the replica still serves, under the old file).
type reloader struct {
	label    string // the file label of fenceproxy_config_reloads_total
	path     string
	variable string // the variable that names the file, for messages
	watcher  *filewatch.Watcher
	// load reads the file and puts it in force, or fails and changes
	// nothing; fields describe what is now in force, for the log.
	load    func() (fields []zap.Field, err error)
	log     *zap.Logger
	reloads reloadMetrics
}

// reloadMetrics are the reload collectors, shared by every reloaded file.
type reloadMetrics struct {
	count *prometheus.CounterVec // fenceproxy_config_reloads_total{file,result}
	last  *prometheus.GaugeVec   // fenceproxy_config_last_reload_successful{file}
}

// newReloadMetrics registers the reload collectors, shared by every
// reloaded file.
func newReloadMetrics(reg prometheus.Registerer) reloadMetrics {
	m := reloadMetrics{
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_config_reloads_total",
			Help: "Re-reads of a configuration file (file: routes, keys) by result: ok (in force), error (the file does not parse; the old one stays in force).",
		}, []string{"file", "result"}),
		// A gauge says "the last reload failed, and none succeeded since"
		// exactly, which the counters can only approximate over a window.
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fenceproxy_config_last_reload_successful",
			Help: "1 when the last read of the file (file: routes, keys) put it in force, 0 when it was invalid and the file read before stays in force.",
		}, []string{"file"}),
	}
	reg.MustRegister(m.count, m.last)
	return m
}

// newReloader starts watching path. Call it before the file's first read,
// so that a change between that read and the watch is still seen.
func newReloader(label, variable, path string, load func() ([]zap.Field, error), log *zap.Logger, reloads reloadMetrics) (*reloader, error) {
	w, err := filewatch.New(path, filewatch.WithErrorHandler(func(err error) {
		log.Warn("watching a configuration file", zap.String("variable", variable), zap.String("file", path), zap.Error(err))
	}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", variable, err)
	}
	for _, r := range []string{"ok", "error"} {
		reloads.count.WithLabelValues(label, r) // visible at 0 from the start, for alerts
	}
	reloads.last.WithLabelValues(label).Set(1) // the start read it (or did not start)
	return &reloader{label: label, path: path, variable: variable, watcher: w, load: load, log: log, reloads: reloads}, nil
}

// reload reads the file again and puts it in force, or keeps the old one.
func (r *reloader) reload(why string) {
	fields, err := r.load()
	if err != nil {
		r.reloads.count.WithLabelValues(r.label, "error").Inc()
		r.reloads.last.WithLabelValues(r.label).Set(0)
		r.log.Error("the new file is invalid: the one read before stays in force", zap.String("trigger", why),
			zap.String("variable", r.variable), zap.String("file", r.path), zap.Error(err))
		return
	}
	r.reloads.count.WithLabelValues(r.label, "ok").Inc()
	r.reloads.last.WithLabelValues(r.label).Set(1)
	r.log.Info("reloaded", append([]zap.Field{zap.String("trigger", why), zap.String("variable", r.variable),
		zap.String("file", r.path)}, fields...)...)
}

// watch reloads on every change of the file and on SIGHUP until ctx ends.
func (r *reloader) watch(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.watcher.Run(ctx, func() {
			select {
			case changed <- struct{}{}:
			default: // a reload is pending; it reads the newest file
			}
		})
	}()
	defer func() { <-done }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("SIGHUP")
		case <-changed:
			r.reload("file changed")
		}
	}
}
