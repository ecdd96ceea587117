// Package freeport hands test processes loopback ports that were free a
// moment ago. A port asked for by binding to port 0 and closing can come
// back from the very next bind: a test that asks twice in a row for a data
// and an admin port then gets the same one twice (seen in CI: fenceproxy
// refused to start, FENCE_ADMIN_ADDR must differ from FENCE_LISTEN_ADDR).
// So a port is never handed out twice in one process. Another process may
// still take a port between its close and the caller's bind; callers that
// start servers retry around that.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// tries bounds the search for a port this process has not had yet; the
// kernel picks ports across a range of thousands, so a handful suffices.
const tries = 64

// Port returns a port on 127.0.0.1 that was free a moment ago and that no
// earlier call in this process returned.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	// Hold every listener until a new port is found, so the kernel cannot
	// offer the same repeated port again within this search.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range tries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if !handed[port] {
			handed[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no port this process has not had in %d tries", tries)
}

// Addr is Port as "127.0.0.1:port".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}
