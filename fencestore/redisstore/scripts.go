package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each is compiled once: its SHA-1, which EVALSHA names, is
// computed here rather than per call. The scripts that read or compare
// marks run behind marks.lua, the helpers they share (canonical decimals,
// their comparison, the stored mark's form, pcall that returns the error),
// and those of the drain barrier behind flight.lua too (entering and
// releasing an in-flight entry, which admit.lua and release.lua share):
// Redis runs a script as one chunk and has no import.
//
// Each begins with a Redis 7 shebang whose flags omit no-writes: Redis then
// treats the script as a write and refuses it on a replica (READONLY) before
// it runs, so no admission is ever decided on a replica's copy of the marks,
// whether the script would have written or not. Without allow-oom Redis also
// refuses admissions while it is above maxmemory (closed); a release, which
// only frees memory, is allowed then. Redis before 7.0 cannot parse a
// shebang: fenceproxy needs 7.0 or later (docs/compatibility.md).
const (
	writeShebang   = "#!lua\n"
	releaseShebang = "#!lua flags=allow-oom\n"
)

var (
	//go:embed marks.lua
	marksLib string
	//go:embed admit.lua
	admitFile string
	//go:embed raise.lua
	raiseFile string
	//go:embed reset.lua
	resetFile string
	//go:embed flight.lua
	flightLib string
	//go:embed release.lua
	releaseFile string
	//go:embed marklost.lua
	markLostFile string

	admitSource   = writeShebang + marksLib + flightLib + admitFile
	releaseSource = releaseShebang + marksLib + flightLib + releaseFile

	admitScript   = redis.NewScript(admitSource)
	raiseScript   = redis.NewScript(writeShebang + marksLib + raiseFile)
	resetScript   = redis.NewScript(writeShebang + marksLib + resetFile)
	releaseScript = redis.NewScript(releaseSource)
	// markLostScript needs none of marks.lua.
	markLostScript = redis.NewScript(writeShebang + markLostFile)
)
