package inject

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzStream: on any input, Stream does not panic, and what it writes is a
// fixed point: injecting its output again changes nothing. The corpus
// starts from the real-world-style manifests of testdata/in.
func FuzzStream(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "in", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	opts := Options{Image: "fenceproxy:v0.0.1", RedisURL: "redis://redis:6379/0"}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Stream(in, opts)
		if err != nil {
			return
		}
		again, err := Stream(out, opts)
		if err != nil {
			t.Fatalf("the output of an injection is refused: %v\ninput:\n%s\noutput:\n%s", err, in, out)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point:\ninput:\n%s\nfirst:\n%s\nsecond:\n%s", in, out, again)
		}
	})
}
