package main

import (
	"io/fs"
	"math"
	"runtime/debug"
	"testing"
)

// GOGC and GOMEMLIMIT's defaults apply only where the environment is
// silent: a GOGC or GOMEMLIMIT set is left as the runtime read it; the
// soft limit is 90% of the process's memory limit (cgroup v2 or v1, the
// lowest of its own cgroup's, its ancestors' and the mount root's), none
// when there is none.
func TestGCSettings(t *testing.T) {
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	tests := []struct {
		name        string
		env         map[string]string
		files       map[string]string
		runtimeGC   int   // the percent the runtime holds before (as if read from GOGC)
		wantPercent int   // after
		wantLimit   int64 // after; math.MaxInt64 none
		wantFrom    string
	}{
		{name: "nothing set, no cgroup limit", runtimeGC: 100, wantPercent: defaultGCPercent, wantLimit: math.MaxInt64},
		{name: "GOGC set", env: map[string]string{"GOGC": "50"}, runtimeGC: 50, wantPercent: 50, wantLimit: math.MaxInt64},
		{name: "GOGC=off", env: map[string]string{"GOGC": "off"}, runtimeGC: -1, wantPercent: -1, wantLimit: math.MaxInt64},
		{name: "cgroup v2 limit", runtimeGC: 100, files: map[string]string{v2: "536870912\n"}, wantPercent: defaultGCPercent,
			wantLimit: 483183820, wantFrom: v2},
		{name: "cgroup v2 max, v1 limit", runtimeGC: 100, files: map[string]string{v2: "max\n", v1: "1073741824\n"},
			wantPercent: defaultGCPercent, wantLimit: 966367641, wantFrom: v1},
		{name: "cgroup v1 unlimited", runtimeGC: 100, files: map[string]string{v1: "9223372036854771712\n"},
			wantPercent: defaultGCPercent, wantLimit: math.MaxInt64},
		// The process's own cgroup, from /proc/self/cgroup.
		{name: "systemd unit's MemoryMax (v2, no cgroup namespace)", runtimeGC: 100, files: map[string]string{
			"/proc/self/cgroup": "0::/system.slice/fenceproxy.service\n",
			"/sys/fs/cgroup/system.slice/fenceproxy.service/memory.max": "268435456\n", "/sys/fs/cgroup/system.slice/memory.max": "max\n"},
			wantPercent: defaultGCPercent, wantLimit: 241591910, wantFrom: "/sys/fs/cgroup/system.slice/fenceproxy.service/memory.max"},
		{name: "an ancestor's lower limit", runtimeGC: 100, files: map[string]string{
			"/proc/self/cgroup": "0::/user.slice/user-0.slice/session-1.scope\n",
			"/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope/memory.max": "max\n",
			"/sys/fs/cgroup/user.slice/user-0.slice/memory.max":                 "1073741824\n",
			"/sys/fs/cgroup/user.slice/memory.max":                              "536870912\n"},
			wantPercent: defaultGCPercent, wantLimit: 483183820, wantFrom: "/sys/fs/cgroup/user.slice/memory.max"},
		{name: "v1 container without a cgroup namespace: the host's path, its limit at the mount root", runtimeGC: 100,
			files:       map[string]string{"/proc/self/cgroup": "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n", v1: "1073741824\n"},
			wantPercent: defaultGCPercent, wantLimit: 966367641, wantFrom: v1},
		{name: "v1 with the memory controller beside another", runtimeGC: 100, files: map[string]string{
			"/proc/self/cgroup": "5:cpuacct,memory:/kubepods/pod1/c1\n",
			"/sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": "536870912\n"},
			wantPercent: defaultGCPercent, wantLimit: 483183820, wantFrom: "/sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes"},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "100MiB"}, runtimeGC: 100,
			files: map[string]string{v2: "536870912\n"}, wantPercent: defaultGCPercent, wantLimit: 100 << 20, wantFrom: "GOMEMLIMIT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(tc.runtimeGC)
			debug.SetMemoryLimit(math.MaxInt64)
			if tc.env["GOMEMLIMIT"] != "" {
				debug.SetMemoryLimit(100 << 20) // as the runtime read it
			}
			s := applyGCSettings(func(k string) string { return tc.env[k] }, func(name string) ([]byte, error) {
				if v, ok := tc.files[name]; ok {
					return []byte(v), nil
				}
				return nil, fs.ErrNotExist
			})
			gotPercent, gotLimit := debug.SetGCPercent(tc.runtimeGC), debug.SetMemoryLimit(-1)
			if gotPercent != tc.wantPercent || gotLimit != tc.wantLimit || s.GCPercent != tc.wantPercent ||
				s.MemLimit != tc.wantLimit || s.LimitFrom != tc.wantFrom {
				t.Fatalf("GOGC %d, limit %d (reported %+v); want %d, %d from %q", gotPercent, gotLimit, s,
					tc.wantPercent, tc.wantLimit, tc.wantFrom)
			}
		})
	}
}
