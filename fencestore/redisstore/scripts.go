package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each is compiled once: its SHA-1, which EVALSHA names, is
// computed here rather than per call. The scripts that read or compare
// marks run behind marks.lua, the helpers they share (canonical decimals,
// their comparison, the stored mark's form, pcall that returns the error):
// Redis runs a script as one chunk and has no import.
var (
	//go:embed marks.lua
	marksLib string
	//go:embed admit.lua
	admitFile string
	//go:embed raise.lua
	raiseFile string
	//go:embed reset.lua
	resetFile string
	//go:embed release.lua
	releaseFile string
	//go:embed check.lua
	checkSource string
	//go:embed marklost.lua
	markLostSource string

	admitSource   = marksLib + admitFile
	releaseSource = marksLib + releaseFile

	admitScript   = redis.NewScript(admitSource)
	raiseScript   = redis.NewScript(marksLib + raiseFile)
	resetScript   = redis.NewScript(marksLib + resetFile)
	releaseScript = redis.NewScript(releaseSource)
	checkScript   = redis.NewScript(checkSource)
	// markLostScript needs none of marks.lua.
	markLostScript = redis.NewScript(markLostSource)
)
