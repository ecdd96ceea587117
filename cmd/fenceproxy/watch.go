package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
)

// masterWatch notices when the Redis server behind the store changes (a
// failover, or a restart: both give a new run id) or stops being a master,
// and records it in the log and in metrics. Either event is where marks can
// be lost (see the durability matrix in docs), so an operator wants to see
// it next to the refusals it may explain.
type masterWatch struct {
	store    *redisstore.Store
	log      *zap.Logger
	every    time.Duration
	timeout  time.Duration
	changes  prometheus.Counter
	isMaster prometheus.Gauge
	// changed, if set, is called when the first server answers and whenever
	// another one takes its place: a server that restarted or took over may
	// run with other settings (settingsWatch.poke).
	changed func()
}

func newMasterWatch(s *redisstore.Store, reg prometheus.Registerer, log *zap.Logger, every, timeout time.Duration) *masterWatch {
	w := &masterWatch{
		store: s, log: log, every: every, timeout: timeout,
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_redis_master_changes_total",
			Help: "Times the Redis server behind the store changed (new run id: a failover or a restart) since start.",
		}),
		isMaster: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_redis_master",
			Help: "1 while the Redis server that admissions reach reports role master, 0 otherwise or when it does not answer.",
		}),
	}
	reg.MustRegister(w.changes, w.isMaster)
	return w
}

// run polls until ctx ends.
func (w *masterWatch) run(ctx context.Context) {
	var last redisstore.ServerInfo
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		last = w.check(ctx, last)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *masterWatch) check(ctx context.Context, last redisstore.ServerInfo) redisstore.ServerInfo {
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	si, err := w.store.Server(cctx)
	if err != nil {
		w.isMaster.Set(0)
		return last // unknown: keep the last identity, a later answer is compared with it
	}
	if si.Role == "master" {
		w.isMaster.Set(1)
	} else {
		w.isMaster.Set(0)
	}
	if si.RunID != last.RunID && w.changed != nil {
		w.changed()
	}
	switch {
	case last.RunID == "":
		w.log.Info("redis server", zap.String("run_id", si.RunID), zap.String("role", si.Role))
	case si.RunID != last.RunID:
		w.changes.Inc()
		w.log.Warn("redis server changed: a failover or a restart; marks written since its last persistence or replication may be lost",
			zap.String("run_id", si.RunID), zap.String("previous_run_id", last.RunID), zap.String("role", si.Role))
	case si.Role != last.Role:
		w.log.Warn("redis role changed", zap.String("run_id", si.RunID), zap.String("role", si.Role), zap.String("previous_role", last.Role))
	}
	return si
}
