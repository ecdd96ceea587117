package upstream

import (
	"bufio"
	"context"
	"time"
)

// get returns an idle connection to addr that is still open, or dials one.
func (t *Transport) get(ctx context.Context, addr string) (*upConn, error) {
	now := time.Now()
	t.mu.Lock()
	for {
		conns := t.idle[addr]
		if len(conns) == 0 {
			break
		}
		c := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		t.idle[addr] = conns[:len(conns)-1]
		t.mu.Unlock()
		// An idle connection has no reader, so nobody noticed if the
		// upstream closed it or sent bytes nobody asked for (http.Transport's
		// readLoop would have): look. Every time, however recently the
		// connection was used: an upstream shutting down closes its idle
		// connections at once, and bytes past a response can land a moment
		// after it, so a connection used a millisecond ago is no safer, and
		// under load every connection is. (Skipped for one used within 50
		// ms, TestConformance, TestUnsolicitedBytes and
		// TestClosedIdleConnection fail: a forged answer, an unexpected EOF.)
		if now.Sub(c.idleSince) < t.idleTimeout && c.alive() {
			c.reused = true
			return c, nil
		}
		c.close()
		t.mu.Lock()
	}
	t.mu.Unlock()

	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upConn{conn: nc, key: addr, pastDeadline: t.pastDeadline}
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(c, 8<<10)
	c.initPeek()
	return c, nil
}

// put keeps c for the next request, or closes it if the pool is full or the
// upstream sent more than the response it framed.
func (t *Transport) put(c *upConn) {
	if c.br.Buffered() != 0 {
		// Bytes past the end of the response (beyond its Content-Length or
		// terminating chunk, a body after a HEAD, 204 or 304): the next
		// request on c would read them as its response, one the upstream
		// never sent it. http.Transport drops such a connection too.
		c.close()
		return
	}
	c.idleSince = time.Now()
	c.ctx = nil // an idle connection keeps no request alive
	t.mu.Lock()
	if len(t.idle[c.key]) < t.maxIdle {
		if t.idle == nil {
			t.idle = make(map[string][]*upConn)
		}
		t.idle[c.key] = append(t.idle[c.key], c)
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
		}
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	c.close()
}

// sweepIdle closes the connections idle for idleTimeout or longer and arms
// itself again for the oldest of the rest.
func (t *Transport) sweepIdle() {
	now := time.Now()
	var expired []*upConn
	var oldest time.Time
	t.mu.Lock()
	for addr, conns := range t.idle {
		kept := conns[:0]
		for _, c := range conns {
			if now.Sub(c.idleSince) >= t.idleTimeout {
				expired = append(expired, c)
				continue
			}
			if oldest.IsZero() || c.idleSince.Before(oldest) {
				oldest = c.idleSince
			}
			kept = append(kept, c)
		}
		clear(conns[len(kept):])
		t.idle[addr] = kept
	}
	t.sweep = nil
	if !oldest.IsZero() {
		t.sweep = time.AfterFunc(oldest.Add(t.idleTimeout).Sub(now), t.sweepIdle)
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, conns := range idle {
		for _, c := range conns {
			c.close()
		}
	}
	t.fallback.CloseIdleConnections()
}
