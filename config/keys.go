package config

import (
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// CheckKeySet reports whether data, the content of a FENCE_TOKEN_KEYS_FILE,
// is a JWK Set the proxy accepts: it parses it with the very parser the
// proxy verifies tokens with (so a check cannot drift from what the proxy
// reads), and returns every problem it found, each naming its key. A private
// asymmetric key in the set is one of them.
//
// Load does not read the keys file (the proxy reads it, and re-reads it when
// it changes); CheckKeySet is for tools that check a configuration without
// running the proxy, such as the deploy module's manifest checks.
//
// A set with no keys parses (the proxy then refuses every signed token: that
// is how every key is revoked at once), but a configuration that ships one
// is reported: it fences every route shut.
func CheckKeySet(data []byte) error {
	ks, err := fencejwt.ParseKeySet(data)
	if err == nil && ks.Len() == 0 {
		return errEmptyKeySet
	}
	return err
}

var errEmptyKeySet = errors.New("the JWK Set has no keys: every signed token would be refused (an emptied keys file revokes every key)")
