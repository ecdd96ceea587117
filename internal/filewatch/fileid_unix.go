//go:build unix

package filewatch

import (
	"os"
	"syscall"
)

func fileIDOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		// The conversions: the field types differ by platform.
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileID{}
}
