//go:build !linux

package childproc

import "syscall"

// Only Linux has a parent-death signal; elsewhere the child outlives a
// parent that is killed.
func killWithParent(*syscall.SysProcAttr) {}
