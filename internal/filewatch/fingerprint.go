package filewatch

import (
	"os"
	"path/filepath"
)

// fingerprint is what a check compares: the file the path resolves to and
// its stat. The zero value is "missing" (or unreadable).
type fingerprint struct {
	exists bool
	target string // the path after filepath.EvalSymlinks
	size   int64
	mtime  int64 // in nanoseconds
	id     fileID
}

// fileID is a file's device and inode, zero where the platform has none.
type fileID struct{ dev, ino uint64 }

// fingerprintOf fingerprints what path resolves to. It resolves the links
// before and after the stat and returns ok false if the two differ three
// times running, so that a link swapped during the stat never yields a
// mixture of the old and the new file.
func fingerprintOf(path string) (fp fingerprint, ok bool) {
	for range 3 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fingerprint{}, true
		}
		fi, statErr := os.Stat(target)
		again, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fingerprint{}, true
		}
		if again != target {
			continue
		}
		if statErr != nil {
			return fingerprint{}, true
		}
		return fingerprint{
			exists: true,
			target: target,
			size:   fi.Size(),
			mtime:  fi.ModTime().UnixNano(),
			id:     fileIDOf(fi),
		}, true
	}
	return fingerprint{}, false
}

// dirIdentity is the identity of a directory, to notice it replaced.
func dirIdentity(dir string) (fileID, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return fileID{}, err
	}
	return fileIDOf(fi), nil
}
