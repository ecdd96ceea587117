package redistest

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

//go:embed shim/clockshim.c
var clockShimSource []byte

// ClockShim is a compiled shim/clockshim.c: an LD_PRELOAD library that
// steps the wall clock of the processes it is loaded into (redis-server, in
// the tests that step the store's clock: this package's users and the fault
// suite), leaving their monotonic clocks alone.
type ClockShim struct {
	// Lib is the library, OffsetFile the file the loaded processes read
	// their offset from.
	Lib, OffsetFile string
}

// BuildClockShim compiles the shim with gcc into dir and creates its offset
// file at 0 (the real clock).
func BuildClockShim(dir string) (*ClockShim, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return nil, errors.New("gcc not found (the clock shim is compiled from source): apt-get install -y gcc")
	}
	src, lib := filepath.Join(dir, "clockshim.c"), filepath.Join(dir, "clockshim.so")
	if err := os.WriteFile(src, clockShimSource, 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gcc clockshim.c: %w: %s", err, out)
	}
	c := &ClockShim{Lib: lib, OffsetFile: filepath.Join(dir, "offset")}
	if err := c.Step(0); err != nil {
		return nil, err
	}
	return c, nil
}

// Env is the environment that loads the shim into a process.
func (c *ClockShim) Env() []string {
	return []string{"LD_PRELOAD=" + c.Lib, "CLOCKSHIM_OFFSET_FILE=" + c.OffsetFile}
}

// Step sets the wall clock of every process that loaded the shim to the
// real one plus offset. The file is written in place, never truncated: the
// processes have it mapped.
func (c *ClockShim) Step(offset time.Duration) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(int64(offset)))
	f, err := os.OpenFile(c.OffsetFile, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b[:], 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
