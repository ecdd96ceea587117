//go:build linux || darwin || freebsd || netbsd || openbsd

package upstream

import "syscall"

// canPeek: an idle connection can be looked at before it is reused.
const canPeek = true

// peeker looks at an idle connection without reading from it: one
// non-blocking MSG_PEEK. The function value is made once per connection so
// that the look allocates nothing.
type peeker struct {
	raw  syscall.RawConn
	fn   func(fd uintptr) bool
	buf  [1]byte
	dead bool
}

func (c *upConn) initPeek() {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.peek.raw = raw
	c.peek.fn = c.peek.look
}

func (p *peeker) look(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	// EAGAIN: open, nothing to read, as an idle connection should be.
	// Anything else cannot carry a request: no error and no byte is the
	// upstream's FIN, a byte is something nobody asked for (a 408, say), and
	// an error is a broken connection.
	p.dead = err != syscall.EAGAIN
	return true
}

// alive reports whether the upstream still holds the idle connection open
// and has sent nothing on it.
func (c *upConn) alive() bool {
	if c.peek.raw == nil {
		// A dial that returned no socket: what it holds cannot be seen, so
		// it is not trusted with another request.
		return false
	}
	if err := c.peek.raw.Read(c.peek.fn); err != nil {
		return false
	}
	return !c.peek.dead
}
