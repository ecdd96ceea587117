package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The "nogeneration" control of redis-restore: the backup is put back with
// a command appended to its AOF that raises the store's generation by
// generationForge, so that the server, as it loads the files, holds the
// older marks under a generation above any a replica has seen (the store
// advances it once per mark write). The generation check then has nothing
// to refuse, as replicas without it would; the restore itself is the real
// run's.

// generationKey is the generation hash of the replicas' default key prefix
// ("fence:") on a single server or behind Sentinel (docs/stores.md).
const generationKey = "{fence:}:generation"

// generationForge is added to the restored generation: more than the mark
// writes a scenario makes.
const generationForge = 1_000_000_000

// appendToAOF appends cmd to the last incremental file the manifest of
// the AOF directory dir names, after the last complete command in it (a
// copy taken while the server wrote can end inside one, which Redis
// tolerates at the end of the files only).
func appendToAOF(dir string, cmd ...string) error {
	manifest, err := os.ReadFile(filepath.Join(dir, "appendonly.aof.manifest"))
	if err != nil {
		return err
	}
	incr := ""
	for line := range strings.Lines(string(manifest)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "file" {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if f[i] == "type" && f[i+1] == "i" {
				incr = f[1]
			}
		}
	}
	if incr == "" {
		return fmt.Errorf("%s: the manifest names no incremental file", dir)
	}
	path := filepath.Join(dir, incr)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := completeCommands(data)
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(cmd))
	for _, a := range cmd {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(n)); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.WriteAt(b.Bytes(), int64(n)); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// completeCommands returns the length of the longest prefix of an AOF's
// data made of whole commands (RESP arrays of bulk strings, and the '#'
// annotation lines Redis may write between them).
func completeCommands(data []byte) int {
	pos := 0
	for pos < len(data) {
		end, ok := commandEnd(data, pos)
		if !ok {
			return pos
		}
		pos = end
	}
	return pos
}

// commandEnd returns where the command (or annotation) that starts at pos
// ends, and false when it is cut short or not a command.
func commandEnd(data []byte, pos int) (int, bool) {
	line := func(at int) (string, int, bool) {
		i := bytes.Index(data[at:], []byte("\r\n"))
		if i < 0 {
			return "", 0, false
		}
		return string(data[at : at+i]), at + i + 2, true
	}
	head, next, ok := line(pos)
	switch {
	case !ok:
		return 0, false
	case strings.HasPrefix(head, "#"):
		return next, true
	case !strings.HasPrefix(head, "*"):
		return 0, false
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 {
		return 0, false
	}
	for range n {
		h, after, ok := line(next)
		if !ok || !strings.HasPrefix(h, "$") {
			return 0, false
		}
		l, err := strconv.Atoi(h[1:])
		if err != nil || l < 0 || after+l+2 > len(data) || string(data[after+l:after+l+2]) != "\r\n" {
			return 0, false
		}
		next = after + l + 2
	}
	return next, true
}
