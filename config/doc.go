// Package config turns fenceproxy's environment (FENCE_* variables, read with
// caarlos0/env from a map so callers and tests choose the source) and its
// optional YAML routes file into a Config. Everything is checked once, at
// start: Load either returns a fully validated Config, with every default
// applied, every route pattern and resource template parsed and every
// contradiction ruled out, so nothing downstream needs to check it again, or
// it returns every problem it found at once, one per line, each naming the
// variable or the route and key at fault. Error messages never contain a
// Redis password or the password of a URL.
package config
