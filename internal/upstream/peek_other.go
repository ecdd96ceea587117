//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package upstream

// canPeek is false where MSG_PEEK is not available: an idle connection
// cannot be looked at, so bytes the upstream sent to it while idle would be
// read as the next request's response. Every request then goes through
// http.Transport, whose read loop sees them.
const canPeek = false

// peeker is empty: there is nothing to look with.
type peeker struct{}

func (c *upConn) initPeek() {}

func (c *upConn) alive() bool { return false }
