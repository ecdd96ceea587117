package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
	"github.com/fenceproxy/fenceproxy/internal/filewatch"
)

// tokenKeys is the verifier of signed tokens (FENCE_TOKEN_KEYS_FILE) and
// the reloading of its keys file: on change (a Kubernetes ConfigMap or
// Secret update is a symlink swap in the file's directory, a plain edit or
// rename is seen too) and on SIGHUP. A file that does not parse keeps the
// old keys: logged with every problem and counted, never a restart and
// never a proxy without keys.
type tokenKeys struct {
	path     string
	watcher  *filewatch.Watcher
	verifier *fencejwt.Verifier
	log      *zap.Logger
	reloads  *prometheus.CounterVec
}

// loadTokenKeys reads the keys file once, at start: a file that does not
// parse is a configuration error there. It returns nil when no file is
// configured.
func loadTokenKeys(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (*tokenKeys, error) {
	if cfg.TokenKeysFile == "" {
		return nil, nil
	}
	// The watcher first: a change between the read and the watch's start
	// is then still seen.
	w, err := filewatch.New(cfg.TokenKeysFile, filewatch.WithErrorHandler(func(err error) {
		log.Warn("watching the keys file", zap.String("file", cfg.TokenKeysFile), zap.Error(err))
	}))
	if err != nil {
		return nil, fmt.Errorf("FENCE_TOKEN_KEYS_FILE: %w", err)
	}
	keys, err := readKeySet(cfg.TokenKeysFile)
	if err != nil {
		return nil, fmt.Errorf("FENCE_TOKEN_KEYS_FILE: %w", err)
	}
	k := &tokenKeys{
		path:     cfg.TokenKeysFile,
		watcher:  w,
		verifier: fencejwt.NewVerifier(keys, cfg.TokenLeeway, 0),
		log:      log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_config_reloads_total",
			Help: "Re-reads of a configuration file (file: keys) by result: ok (in force), error (the file does not parse; the old one stays in force).",
		}, []string{"file", "result"}),
	}
	reg.MustRegister(k.reloads)
	for _, r := range []string{"ok", "error"} {
		k.reloads.WithLabelValues("keys", r)
	}
	log.Info("signed tokens: every fenced request's token must be a JWS of these keys", zap.Strings("kids", sortedKIDs(keys)))
	return k, nil
}

func readKeySet(path string) (*fencejwt.KeySet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := fencejwt.ParseKeySet(data)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", path, err)
	}
	return keys, nil
}

func sortedKIDs(k *fencejwt.KeySet) []string {
	kids := k.KIDs()
	sort.Strings(kids)
	return kids
}

// reload reads the keys file again and puts it in force, or keeps the old
// keys.
func (k *tokenKeys) reload(why string) {
	keys, err := readKeySet(k.path)
	if err != nil {
		k.reloads.WithLabelValues("keys", "error").Inc()
		k.log.Error("the keys file does not parse: the old keys stay in force", zap.String("trigger", why),
			zap.String("file", k.path), zap.Error(err), zap.Strings("kids_in_force", sortedKIDs(k.verifier.Keys())))
		return
	}
	k.verifier.SetKeys(keys)
	k.reloads.WithLabelValues("keys", "ok").Inc()
	k.log.Info("keys file reloaded", zap.String("trigger", why), zap.String("file", k.path), zap.Strings("kids", sortedKIDs(keys)))
}

// watch reloads on every change of the file and on SIGHUP until ctx ends.
func (k *tokenKeys) watch(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = k.watcher.Run(ctx, func() {
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
			k.reload("SIGHUP")
		case <-changed:
			k.reload("file changed")
		}
	}
}
