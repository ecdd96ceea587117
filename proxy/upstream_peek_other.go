//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package proxy

// peeker is empty where MSG_PEEK is not available: an idle connection the
// upstream closed is then found by the request that uses it.
type peeker struct{}

func (c *upConn) initPeek() {}

func (c *upConn) alive() bool { return true }
