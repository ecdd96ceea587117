// Package redistest starts real redis-server processes for tests: no mocks,
// since what the stores must get right (Lua, replies, WAIT, AOF, a server that
// dies or stalls) is Redis's own behaviour. Each server listens on a free
// 127.0.0.1 port, keeps its files in the test's temporary directory, runs in
// its own process group, and is stopped by its PID when the test ends; nothing
// is ever signalled by name. When redis-server is not on PATH the test fails
// with the command that installs it, unless FENCE_SKIP_REDIS=1 asks to skip.
package redistest
