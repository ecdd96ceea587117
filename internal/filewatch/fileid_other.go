//go:build !unix

package filewatch

import "os"

// fileIDOf has no device and inode to offer here: the fingerprint relies on
// the target path, size and modification time.
func fileIDOf(os.FileInfo) fileID { return fileID{} }
