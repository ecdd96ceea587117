package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// tokenKeys is the verifier of signed tokens (FENCE_TOKEN_KEYS_FILE) and
// the reloading of its keys file (reloader): key rotation without a
// restart; a file emptied ({"keys":[]}) or removed revokes every key (an
// operator's answer to a leak); a file that does not parse keeps the last
// good keys (a typo must not take writes down).
type tokenKeys struct {
	verifier *fencejwt.Verifier
	reloader *reloader
}

// loadTokenKeys reads the keys file once, at start: a file that does not
// parse is a configuration error there. It returns nil when no file is
// configured.
func loadTokenKeys(cfg *config.Config, log *zap.Logger, reloads reloadMetrics) (*tokenKeys, error) {
	if cfg.TokenKeysFile == "" {
		return nil, nil
	}
	k := &tokenKeys{}
	var err error
	k.reloader, err = newReloader("keys", "FENCE_TOKEN_KEYS_FILE", cfg.TokenKeysFile, func() ([]zap.Field, error) {
		keys, err := readKeySet(cfg.TokenKeysFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Removed: an operator answering a leak. Trust no key rather
			// than the last ones read, which may be the leaked ones.
			keys = fencejwt.EmptyKeySet()
		case err != nil:
			return nil, fmt.Errorf("%w (kids in force: %v)", err, sortedKIDs(k.verifier.Keys()))
		}
		k.verifier.SetKeys(keys)
		if keys.Len() == 0 {
			log.Warn("no signing key is in force (the keys file is empty or was removed): every signed token is refused (401) "+
				"until keys are published again", zap.String("file", cfg.TokenKeysFile))
		}
		return []zap.Field{zap.Strings("kids", sortedKIDs(keys))}, nil
	}, log, reloads)
	if err != nil {
		return nil, err
	}
	keys, err := readKeySet(cfg.TokenKeysFile)
	if err != nil {
		return nil, fmt.Errorf("FENCE_TOKEN_KEYS_FILE: %w", err)
	}
	k.verifier = fencejwt.NewVerifier(keys, cfg.TokenLeeway, 0)
	if keys.Len() == 0 {
		// Started after every key was revoked: serve (reads and unfenced
		// routes go on), refuse every signed token.
		log.Warn("the keys file holds no key: every signed token is refused (401) until keys are published",
			zap.String("file", cfg.TokenKeysFile))
		return k, nil
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
