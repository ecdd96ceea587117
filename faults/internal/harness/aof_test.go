package harness

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCompleteCommands(t *testing.T) {
	const set = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n"
	const sel = "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n"
	for _, c := range []struct {
		name, data string
		want       int
	}{
		{"empty", "", 0},
		{"whole", sel + set, len(sel + set)},
		{"annotation", sel + "#TS:1700000000\r\n" + set, len(sel + "#TS:1700000000\r\n" + set)},
		{"cut in a header", sel + "*3\r", len(sel)},
		{"cut in a length", sel + "*3\r\n$3\r\nSET\r\n$", len(sel)},
		{"cut in a value", sel + set[:len(set)-3], len(sel)},
		{"cut before the last CRLF", sel + set[:len(set)-1], len(sel)},
		{"a value longer than said", sel + "*1\r\n$2\r\nabc\r\n", len(sel)},
	} {
		if got := completeCommands([]byte(c.data)); got != c.want {
			t.Errorf("%s: completeCommands = %d, want %d", c.name, got, c.want)
		}
	}
}

// The command lands after the last whole command of the manifest's last
// incremental file, replacing a cut one.
func TestAppendToAOF(t *testing.T) {
	dir := t.TempDir()
	manifest := "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
	const sel = "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n"
	for name, data := range map[string]string{
		"appendonly.aof.manifest":   manifest,
		"appendonly.aof.1.incr.aof": sel,
		"appendonly.aof.2.incr.aof": sel + "*3\r\n$3\r\nSET\r\n$1\r",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := appendToAOF(dir, "HINCRBY", generationKey, "g", "7"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "appendonly.aof.2.incr.aof"))
	if err != nil {
		t.Fatal(err)
	}
	want := sel + "*4\r\n$7\r\nHINCRBY\r\n$19\r\n{fence:}:generation\r\n$1\r\ng\r\n$1\r\n7\r\n"
	if string(got) != want {
		t.Fatalf("incremental file = %q, want %q", got, want)
	}
}
