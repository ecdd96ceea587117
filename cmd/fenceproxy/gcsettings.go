package main

import (
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// The garbage collector's settings for serve and authz. About half of the
// instructions fenceproxy spends on a request are the collector's
// (docs/performance.md, "Where the CPU goes, per feature"), and its live
// heap is small (a sidecar holds connections, the mark cache and little
// else), so Go's default GOGC=100 collects very often for very little
// memory. fenceproxy's defaults, each only when the environment does not
// set the variable (Go's own GOGC and GOMEMLIMIT, read by the runtime at
// start, always win):
//
//   - GOGC: defaultGCPercent: the heap may grow to that percentage above
//     what the last collection left live before the next one starts;
//   - GOMEMLIMIT: memLimitShare of the process's memory limit (cgroup v2
//     memory.max, or v1 memory.limit_in_bytes: the lowest of its own
//     cgroup's and its ancestors', found from /proc/self/cgroup, as a
//     systemd unit's MemoryMax or a container without a cgroup namespace
//     has it; else the one at the cgroup mount's root, a container's own),
//     so that the larger heap never drives the process out of memory: near
//     the limit the collector runs as often as it must. No limit found:
//     none set.
//
// GOMAXPROCS needs nothing here: since Go 1.25 the runtime follows the
// container's CPU limit (cgroup cpu.max) itself, unless GOMAXPROCS is set.
const (
	defaultGCPercent = 400
	memLimitShare    = 0.9
)

// The cgroup mounts and their limit files, v2 first.
const (
	cgroupV2Root, cgroupV2File = "/sys/fs/cgroup", "memory.max"
	cgroupV1Root, cgroupV1File = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
)

// cgroupMemoryFiles returns the files that may hold the process's memory
// limit, read from /proc/self/cgroup (its text): for each cgroup version
// the process is in, its own cgroup's file and each ancestor's up to the
// mount's root. A path that does not exist under the mount (a container
// without a cgroup namespace sees the host's path, and its own cgroup at
// the mount's root) is simply not read.
func cgroupMemoryFiles(self string) []string {
	var v2, v1 string // the process's cgroup paths
	for _, line := range strings.Split(self, "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(path, "/") {
			continue
		}
		switch {
		case id == "0" && ctrls == "":
			v2 = path
		case slices.Contains(strings.Split(ctrls, ","), "memory"):
			v1 = path
		}
	}
	var files []string
	for _, c := range [...]struct{ root, file, path string }{{cgroupV2Root, cgroupV2File, v2}, {cgroupV1Root, cgroupV1File, v1}} {
		for p := path.Clean(c.path); p != "/" && p != "."; p = path.Dir(p) {
			files = append(files, c.root+p+"/"+c.file)
		}
		files = append(files, c.root+"/"+c.file)
	}
	return files
}

// gcSettings is what applyGCSettings did, for the start's log line.
type gcSettings struct {
	GCPercent int    // in force
	GCFromEnv bool   // GOGC was set: the runtime's reading stands
	MemLimit  int64  // in force; math.MaxInt64: none
	LimitFrom string // "GOMEMLIMIT", a cgroup file, or "" (none)
}

// applyGCSettings sets fenceproxy's defaults for what getenv does not set
// (see above); readFile reads the cgroup files.
func applyGCSettings(getenv func(string) string, readFile func(string) ([]byte, error)) gcSettings {
	var s gcSettings
	if strings.TrimSpace(getenv("GOGC")) != "" {
		s.GCFromEnv = true
		s.GCPercent = debug.SetGCPercent(-1) // read it back: SetGCPercent returns the previous value
		debug.SetGCPercent(s.GCPercent)
	} else {
		debug.SetGCPercent(defaultGCPercent)
		s.GCPercent = defaultGCPercent
	}
	if strings.TrimSpace(getenv("GOMEMLIMIT")) != "" {
		s.MemLimit, s.LimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT" // -1 reads without changing
		return s
	}
	s.MemLimit = math.MaxInt64
	self, _ := readFile("/proc/self/cgroup")
	lowest := int64(math.MaxInt64)
	for _, f := range cgroupMemoryFiles(string(self)) {
		if limit, ok := cgroupLimit(readFile, f); ok && limit < lowest {
			lowest, s.LimitFrom = limit, f
		}
	}
	if s.LimitFrom != "" {
		s.MemLimit = int64(float64(lowest) * memLimitShare)
		debug.SetMemoryLimit(s.MemLimit)
	}
	return s
}

// cgroupLimit reads a cgroup memory limit file: a number of bytes, or
// "max" (v2) or a number near 2^63 (v1) for none.
func cgroupLimit(readFile func(string) ([]byte, error), name string) (int64, bool) {
	b, err := readFile(name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0, false
	}
	return n, true
}

// field is the settings as one log field, gc: GOGC in force and whether
// the environment set it, the soft memory limit in MiB (0: none) and where
// it came from.
func (s gcSettings) field() zap.Field {
	var mib int64 // 0: no limit
	if s.LimitFrom != "" {
		mib = s.MemLimit >> 20
	}
	return zap.Dict("gc", zap.Int("gogc", s.GCPercent), zap.Bool("gogc_from_env", s.GCFromEnv),
		zap.Int64("memlimit_mib", mib), zap.String("memlimit_from", s.LimitFrom))
}

// osGCSettings applies the settings for this process.
func osGCSettings() gcSettings { return applyGCSettings(os.Getenv, os.ReadFile) }
