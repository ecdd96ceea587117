package config

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// CheckKeySet is the proxy's own parser: a public set passes, a private
// key, a set without kid and a non-set fail with the parser's words.
func TestCheckKeySet(t *testing.T) {
	priv, set, err := fencejwt.NewKey(fencejwt.KindEdDSA, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckKeySet(set); err != nil {
		t.Errorf("a public set: %v", err)
	}
	for name, data := range map[string]string{
		"private key": `{"keys":[` + string(priv) + `]}`,
		"not a set":   `{"kty":"OKP"}`,
		"no json":     `keys`,
	} {
		if err := CheckKeySet([]byte(data)); err == nil || strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: accepted", name)
		}
	}
}
