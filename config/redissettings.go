package config

import (
	"slices"
	"strings"
)

// RedisSettings are Redis's settings as the operator states them in
// FENCE_REDIS_SETTINGS, for a server that refuses CONFIG GET (managed
// services, `rename-command CONFIG ""`): fenceproxy cannot read them there,
// and judges the stated values instead of refusing for want of a reading.
// A field left unset ("") is not stated. When CONFIG GET answers, the values
// read count, and a statement that differs from them is a warning.
type RedisSettings struct {
	MaxmemoryPolicy string // maxmemory-policy
	AppendOnly      string // appendonly: yes or no
	AppendFsync     string // appendfsync: always, everysec or no
}

// Stated reports whether any setting is stated.
func (s RedisSettings) Stated() bool { return s != RedisSettings{} }

// String is the statement as FENCE_REDIS_SETTINGS spells it, in a fixed
// order.
func (s RedisSettings) String() string {
	var parts []string
	for _, kv := range [][2]string{{"maxmemory-policy", s.MaxmemoryPolicy}, {"appendonly", s.AppendOnly}, {"appendfsync", s.AppendFsync}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, ",")
}

// redisSettingValues are the values each stated setting may take, as Redis
// spells them.
var redisSettingValues = map[string][]string{
	"maxmemory-policy": {"noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random",
		"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"},
	"appendonly":  {"yes", "no"},
	"appendfsync": {"always", "everysec", "no"},
}

// parseRedisSettings parses FENCE_REDIS_SETTINGS: a comma list of
// name=value, each name at most once.
func parseRedisSettings(raw string, bad func(variable, format string, args ...any)) RedisSettings {
	const name = "FENCE_REDIS_SETTINGS"
	var s RedisSettings
	if strings.TrimSpace(raw) == "" {
		return s
	}
	seen := map[string]bool{}
	for i, entry := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(entry), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		allowed, known := redisSettingValues[k]
		switch {
		case !ok:
			bad(name, "entry %d %q is not name=value (e.g. maxmemory-policy=noeviction,appendonly=yes,appendfsync=always)", i+1, entry)
			continue
		case !known:
			bad(name, "entry %d: %q is not a setting fenceproxy judges (maxmemory-policy, appendonly, appendfsync)", i+1, k)
			continue
		case seen[k]:
			bad(name, "%s is stated twice", k)
			continue
		case !slices.Contains(allowed, v):
			bad(name, "%s=%q must be one of %s", k, v, strings.Join(allowed, ", "))
			continue
		}
		seen[k] = true
		switch k {
		case "maxmemory-policy":
			s.MaxmemoryPolicy = v
		case "appendonly":
			s.AppendOnly = v
		case "appendfsync":
			s.AppendFsync = v
		}
	}
	if s.AppendOnly == "yes" && s.AppendFsync == "" {
		bad(name, "appendonly=yes needs appendfsync too (always, everysec or no): what a crash loses depends on it")
	}
	return s
}
