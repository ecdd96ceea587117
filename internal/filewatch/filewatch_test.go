package filewatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests use real files and wait for calls through a channel with a
// generous deadline: nothing depends on how fast the machine is. A "no call"
// is checked after a later change has been seen (the marker of finish), plus
// a quiet period, so that an extra call, which comes before the marker's, is
// caught, and a slow machine can only make a check weaker, never fail it.
//
// Contents of successive versions differ in length, so that an in-place
// rewrite is a change even within one tick of the filesystem's clock (see
// Limits in the package documentation).

const (
	deadline = 5 * time.Second        // for a call that must come
	quiet    = 600 * time.Millisecond // for calls that must not
	missing  = "<missing>"            // the content recorded for a missing file
	marker   = "marker: the last change of the test, v99"
	// slowDebounce is for changes made of several system calls (truncate,
	// then write): a check falling between the two would see an empty file.
	// With this margin a descheduled test goroutine on a busy machine does
	// not make the test flaky; the default is used everywhere else.
	slowDebounce = 250 * time.Millisecond
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a changed func that records the content of the file at the
// time of each call.
type recorder struct {
	path    string
	calls   chan string
	errs    chan error
	busy    atomic.Int32
	overlap atomic.Bool
}

func newRecorder(path string) *recorder {
	return &recorder{path: path, calls: make(chan string, 1024), errs: make(chan error, 1024)}
}

func (r *recorder) changed() {
	if r.busy.Add(1) != 1 {
		r.overlap.Store(true)
	}
	defer r.busy.Add(-1)
	time.Sleep(time.Millisecond) // a window for an overlap to show
	b, err := os.ReadFile(r.path)
	s := string(b)
	if err != nil {
		s = missing
	}
	r.calls <- s
}

func (r *recorder) onError(err error) {
	select {
	case r.errs <- err:
	default:
	}
}

// start watches path and stops the watcher at the end of the test.
func start(t *testing.T, path string, opts ...Option) *recorder {
	t.Helper()
	rec := newRecorder(path)
	w, err := New(path, append([]Option{WithErrorHandler(rec.onError)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, w, rec)
	return rec
}

// run runs w with rec until the end of the test, then checks that Run
// returned and never overlapped calls.
func run(t *testing.T, w *Watcher, rec *recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, rec.changed) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(deadline):
			t.Errorf("Run did not return within %v of the cancel", deadline)
		}
		if rec.overlap.Load() {
			t.Error("changed ran concurrently with itself")
		}
		for len(rec.errs) > 0 {
			t.Logf("reported: %v", <-rec.errs)
		}
	})
}

// expect waits for one call per want, in order, with that content.
func (r *recorder) expect(t *testing.T, want ...string) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-r.calls:
			if got != w {
				t.Fatalf("call %d of %d: content %q, want %q", i+1, len(want), got, w)
			}
		case <-time.After(deadline):
			t.Fatalf("no call %d of %d (for content %q) within %v", i+1, len(want), w, deadline)
		}
	}
}

// expectQuiet checks that no call comes for a while.
func (r *recorder) expectQuiet(t *testing.T) {
	t.Helper()
	select {
	case got := <-r.calls:
		t.Fatalf("unexpected call, content %q", got)
	case <-time.After(quiet):
	}
}

// finish makes a last, atomic change and checks that it gives exactly one
// call, the next one: any extra call for the earlier changes would come
// before it.
func (r *recorder) finish(t *testing.T) {
	t.Helper()
	renameOver(t, r.path, marker)
	r.expect(t, marker)
	r.expectQuiet(t)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameOver replaces path atomically: a temporary file in its directory,
// renamed over it.
func renameOver(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestChange: each way of changing the file gives exactly one call, with the
// new content readable at the time of the call.
func TestChange(t *testing.T) {
	t.Parallel()
	type layout struct {
		path  string // the path watched
		other string // a scratch directory elsewhere
	}
	plain := func(t *testing.T) layout {
		l := layout{path: filepath.Join(t.TempDir(), "keys.json"), other: t.TempDir()}
		writeFile(t, l.path, "v1")
		return l
	}
	// linkedOut: keys.json is a link to a file in another directory.
	linkedOut := func(t *testing.T) layout {
		l := layout{path: filepath.Join(t.TempDir(), "keys.json"), other: t.TempDir()}
		writeFile(t, filepath.Join(l.other, "real.json"), "v1")
		symlink(t, filepath.Join(l.other, "real.json"), l.path)
		return l
	}
	tests := []struct {
		name   string
		layout func(*testing.T) layout
		change func(*testing.T, layout, string)
		opts   []Option
	}{{
		name:   "written in place",
		layout: plain,
		change: func(t *testing.T, l layout, s string) { writeFile(t, l.path, s) },
		opts:   []Option{WithDebounce(slowDebounce)},
	}, {
		name:   "temp file renamed over it",
		layout: plain,
		change: func(t *testing.T, l layout, s string) { renameOver(t, l.path, s) },
	}, {
		name:   "moved in from another directory",
		layout: plain,
		change: func(t *testing.T, l layout, s string) {
			src := filepath.Join(l.other, "new.json")
			writeFile(t, src, s)
			if err := os.Rename(src, l.path); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "link retargeted, as ln -sfn",
		layout: func(t *testing.T) layout {
			l := layout{path: filepath.Join(t.TempDir(), "keys.json")}
			writeFile(t, filepath.Join(filepath.Dir(l.path), "a.json"), "v1")
			symlink(t, "a.json", l.path)
			return l
		},
		change: func(t *testing.T, l layout, s string) {
			dir := filepath.Dir(l.path)
			writeFile(t, filepath.Join(dir, "b.json"), s)
			symlink(t, "b.json", filepath.Join(dir, "keys.json.new"))
			if err := os.Rename(filepath.Join(dir, "keys.json.new"), l.path); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		// Seen through the watch on the target's directory: the safety
		// poll (30s) is far beyond the deadline.
		name:   "link target in another directory written in place",
		layout: linkedOut,
		change: func(t *testing.T, l layout, s string) { writeFile(t, filepath.Join(l.other, "real.json"), s) },
		opts:   []Option{WithDebounce(slowDebounce)},
	}, {
		name:   "link target in another directory renamed over",
		layout: linkedOut,
		change: func(t *testing.T, l layout, s string) { renameOver(t, filepath.Join(l.other, "real.json"), s) },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := tt.layout(t)
			rec := start(t, l.path, tt.opts...)
			tt.change(t, l, "version 2")
			rec.expect(t, "version 2")
			tt.change(t, l, "version 3, longer")
			rec.expect(t, "version 3, longer")
			rec.finish(t)
		})
	}
}

// kubernetesVolume is a ConfigMap or Secret volume as the kubelet lays it
// out, with one key, keys.json.
type kubernetesVolume struct {
	dir     string
	current string // the timestamped directory ..data points to
	n       int
}

func newKubernetesVolume(t *testing.T, content string) *kubernetesVolume {
	v := &kubernetesVolume{dir: t.TempDir()}
	v.current = v.writeVersion(t, content)
	symlink(t, v.current, filepath.Join(v.dir, "..data"))
	symlink(t, filepath.Join("..data", "keys.json"), filepath.Join(v.dir, "keys.json"))
	return v
}

func (v *kubernetesVolume) path() string { return filepath.Join(v.dir, "keys.json") }

func (v *kubernetesVolume) writeVersion(t *testing.T, content string) string {
	t.Helper()
	v.n++
	name := fmt.Sprintf("..2026_11_30_12_00_%02d.%03d", v.n, 100+v.n)
	if err := os.Mkdir(filepath.Join(v.dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(v.dir, name, "keys.json"), content)
	return name
}

// swap updates the volume as the kubelet does, with a pause between the
// steps; keepOld leaves the old timestamped directory in place.
func (v *kubernetesVolume) swap(t *testing.T, content string, pause time.Duration, keepOld bool) {
	t.Helper()
	old := v.current
	v.current = v.writeVersion(t, content)
	time.Sleep(pause)
	tmp := filepath.Join(v.dir, "..data_tmp")
	symlink(t, v.current, tmp)
	time.Sleep(pause)
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if keepOld {
		return
	}
	time.Sleep(pause)
	if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesSwap: each swap gives exactly one call, when the new content
// is the one read through the path. Each swap is the marker of the one
// before it: a second call for a swap would read its content again and fail
// the next expect.
//
// Made at once, a swap's events fall within one debounce delay. Made step
// by step, with pauses of a few delays (a slow node), checks run between the
// steps, which must find no change but at the rename of ..data; a busy
// machine can only make the pauses look shorter, never fail the test. With
// the old directory kept, no event comes from the watch on the target's
// directory: the rename of ..data alone must be seen.
func TestKubernetesSwap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pause   time.Duration
		keepOld bool
		opts    []Option
	}{
		{name: "at once"},
		{name: "step by step", pause: 150 * time.Millisecond, opts: []Option{WithDebounce(30 * time.Millisecond)}},
		{name: "old directory kept", keepOld: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newKubernetesVolume(t, "keys v1")
			rec := start(t, v.path(), tt.opts...)
			for i := 2; i <= 4; i++ {
				content := fmt.Sprintf("keys v%d %s", i, strings.Repeat("k", i))
				v.swap(t, content, tt.pause, tt.keepOld)
				rec.expect(t, content)
			}
			rec.expectQuiet(t)
		})
	}
}

// TestDeleteRecreate: a delete gives a call (the caller sees the file
// missing and keeps its state), the file's return another. Deleted and
// created again at once, it gives a call after it is back, possibly preceded
// by one for the gap.
func TestDeleteRecreate(t *testing.T) {
	t.Parallel()
	t.Run("with a pause", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "keys.json")
		writeFile(t, path, "v1")
		rec := start(t, path, WithDebounce(slowDebounce))
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		rec.expect(t, missing)
		writeFile(t, path, "version 2")
		rec.expect(t, "version 2")
		rec.finish(t)
	})
	t.Run("at once", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "keys.json")
		writeFile(t, path, "v1")
		rec := start(t, path, WithDebounce(slowDebounce))
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, "version 2")
		select {
		case got := <-rec.calls:
			if got == missing {
				rec.expect(t, "version 2")
			} else if got != "version 2" {
				t.Fatalf("content %q, want %q", got, "version 2")
			}
		case <-time.After(deadline):
			t.Fatalf("no call within %v", deadline)
		}
		rec.finish(t)
	})
}

// TestUnrelatedFiles: writes, creates, renames and removes of other files in
// the directory give no call; the first call is the real change's. The
// activity comes in bursts with pauses of a few debounce delays, so that
// checks run between them (each would make a wrong call come before the real
// one); a busy machine can only make the test weaker, never fail it.
func TestUnrelatedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	writeFile(t, path, "v1")
	rec := start(t, path, WithDebounce(30*time.Millisecond))
	for i := range 5 {
		for j := range 10 {
			writeFile(t, filepath.Join(dir, "access.log"), strings.Repeat("x", 10*i+j+1))
		}
		time.Sleep(100 * time.Millisecond)
		renameOver(t, filepath.Join(dir, "routes.yaml"), strings.Repeat("r", i+1))
		time.Sleep(100 * time.Millisecond)
		writeFile(t, filepath.Join(dir, "scratch"), "s")
		if err := os.Remove(filepath.Join(dir, "scratch")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	renameOver(t, path, "version 2")
	rec.expect(t, "version 2")
	rec.finish(t)
}

// TestChangeBeforeRun: a change made after New but before Run is reported.
func TestChangeBeforeRun(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	writeFile(t, path, "v1")
	rec := newRecorder(path)
	w, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	renameOver(t, path, "version 2")
	run(t, w, rec)
	rec.expect(t, "version 2")
	rec.finish(t)
}

// TestPolling: the polls see what events do not.
func TestPolling(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond

	t.Run("polling only", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "keys.json")
		writeFile(t, path, "v1")
		rec := start(t, path, WithPollingOnly(), WithPollInterval(interval), WithDebounce(slowDebounce))
		writeFile(t, path, "version 2")
		rec.expect(t, "version 2")
		renameOver(t, path, "version 3, longer")
		rec.expect(t, "version 3, longer")
		rec.finish(t)
	})

	// keys.json links to a link in a directory that is not watched (only
	// the path's and the final target's are), pointing into a third: a
	// change of that middle link sends no event anywhere watched. Before
	// it, the target is replaced and its call awaited: then the watcher has
	// made its first check, which would otherwise see the change.
	chain := func(t *testing.T, opts ...Option) (rec *recorder, retarget func()) {
		dir, mid, a, b := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
		writeFile(t, filepath.Join(a, "keys.json"), "v1")
		writeFile(t, filepath.Join(b, "keys.json"), "version 2")
		symlink(t, filepath.Join(a, "keys.json"), filepath.Join(mid, "link"))
		path := filepath.Join(dir, "keys.json")
		symlink(t, filepath.Join(mid, "link"), path)
		rec = start(t, path, opts...)
		renameOver(t, filepath.Join(a, "keys.json"), "v1, seen")
		rec.expect(t, "v1, seen")
		return rec, func() {
			symlink(t, filepath.Join(b, "keys.json"), filepath.Join(mid, "link.new"))
			if err := os.Rename(filepath.Join(mid, "link.new"), filepath.Join(mid, "link")); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("safety net", func(t *testing.T) {
		t.Parallel()
		rec, retarget := chain(t, WithSafetyInterval(interval))
		retarget()
		rec.expect(t, "version 2")
		rec.finish(t)
	})
	// The control of the test above: without the safety net's short
	// interval the change is not seen, so it is the safety net that saw it.
	t.Run("safety net control", func(t *testing.T) {
		t.Parallel()
		rec, retarget := chain(t)
		retarget()
		rec.expectQuiet(t)
	})

	t.Run("directory removed and created again", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "config")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "keys.json")
		writeFile(t, path, "v1")
		rec := start(t, path, WithPollInterval(interval), WithDebounce(slowDebounce))
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		rec.expect(t, missing)
		select {
		case err := <-rec.errs: // the watch lost is reported, not silent
			t.Logf("reported: %v", err)
		case <-time.After(deadline):
			t.Fatal("the lost watch was not reported")
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		renameOver(t, path, "version 2")
		rec.expect(t, "version 2")
		writeFile(t, path, "version 3, longer")
		rec.expect(t, "version 3, longer")
		rec.finish(t)
	})

	t.Run("directory missing at start", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "later")
		path := filepath.Join(dir, "keys.json")
		rec := start(t, path, WithPollInterval(interval))
		// Past the first check (not needed, but without it the test would
		// pass if that check saw the file, without any poll).
		time.Sleep(4 * DefaultDebounce)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		renameOver(t, path, "version 2")
		rec.expect(t, "version 2")
		rec.finish(t)
	})
}

// TestStop: Run (with fsnotify, and polling only) returns nil soon after its
// context ends and leaves no
// goroutine behind. Not parallel, so that goleak sees this test alone.
func TestStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	writeFile(t, path, "v1")
	for _, opts := range [][]Option{nil, {WithPollingOnly()}} {
		rec := newRecorder(path)
		w, err := New(path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx, rec.changed) }()
		content := fmt.Sprintf("version %d", len(opts)+2)
		renameOver(t, path, content)
		rec.expect(t, content) // it was running
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(deadline):
			t.Fatalf("Run did not return within %v of the cancel", deadline)
		}
		goleak.VerifyNone(t)
	}

	// An ended context: it returns at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Watch(ctx, path, func() { t.Error("changed called") }); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t)
}

func TestMisuse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	for _, opts := range [][]Option{
		{WithDebounce(0)},
		{WithPollInterval(-time.Second)},
		{WithSafetyInterval(0)},
	} {
		if _, err := New(path, opts...); err == nil {
			t.Error("New accepted a non-positive duration")
		}
	}
	if _, err := New(""); err == nil {
		t.Error("New accepted an empty path")
	}
	w, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background(), nil); err == nil {
		t.Error("Run accepted a nil func")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx, func() {}); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("second Run: %v, want an error", err)
	}
}
