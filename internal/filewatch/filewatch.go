// Package filewatch tells a long-running process that a file it has read may
// have changed, so that it can read it again: fenceproxy's JWK Set keys file
// (FENCE_TOKEN_KEYS_FILE) now, its routes file later.
//
// It handles the three ways such a file is updated:
//
//   - edited in place (truncated and written);
//   - replaced by a rename: a temporary file renamed over it, as editors and
//     mv do; or deleted and created again;
//   - swapped by Kubernetes, as described below.
//
// A ConfigMap or Secret volume in Kubernetes is a directory of symbolic
// links:
//
//	/etc/fence/..2026_11_30_12_00_00.123/keys.json   the real file
//	/etc/fence/..data -> ..2026_11_30_12_00_00.123
//	/etc/fence/keys.json -> ..data/keys.json
//
// and the kubelet updates it by writing a new timestamped directory, pointing
// a new link ..data_tmp at it, renaming ..data_tmp over ..data (the one
// atomic step) and deleting the old directory.
//
// # How
//
// The watcher uses fsnotify on the DIRECTORY that holds the path (the
// directory of the path as given, not of the file it links to), never on the
// file: a watch on a file follows its inode and is lost when the file is
// replaced. Events there on the file's name, and every create, remove or
// rename in the directory (..data, a temporary file renamed over the file),
// schedule a check. When the path is a symbolic link to a file in another
// directory, that directory is watched too, so that the target edited in
// place is seen.
//
// A check compares a cheap fingerprint of what the path resolves to with the
// last one: the target path after filepath.EvalSymlinks, and the size,
// modification time, device and inode (where the platform has them) from
// os.Stat. changed is called only when it differs. So the several events of a
// Kubernetes swap give one call, and other files in the directory give none.
// Checks are debounced (100ms by default, [WithDebounce]): events restart the
// delay, so a write made of several system calls is read once it has settled;
// a steady stream of events does not hold a check back more than ten delays.
//
// A missing file is a change (its fingerprint is "missing"), and so is its
// return: changed is called for both, and the caller decides to keep its old
// state while the file is absent. A file deleted and created again within one
// debounce delay gives a single call, after it is back (two if a check
// happens to fall between the delete and the create).
//
// # Polling
//
// The path is also polled, in two ways, and the watcher never stops by itself
// before its context ends:
//
//   - as a safety net, always, every 30s by default ([WithSafetyInterval]):
//     some filesystems (certain network mounts, FUSE) deliver no inotify
//     events, and a symbolic link changed in a directory that is not watched
//     (a chain through a third directory) gives none either;
//   - as the fallback, every 2s by default ([WithPollInterval]), while the
//     directory cannot be watched: it does not exist (yet, or any more: it
//     was deleted or renamed), fsnotify cannot start (inotify limits), or its
//     watcher failed. Every poll tries to watch it again, and a replaced
//     directory (another inode at the same path) is watched anew.
//     [WithPollingOnly] polls this way always, without fsnotify.
//
// Errors (a watch lost, fsnotify failing) go to the function given by
// [WithErrorHandler], if any, each distinct message once until the watch is
// in place again; they never stop the watcher.
//
// # Limits
//
// The fingerprint sees no difference when a file is rewritten in place with
// the same size within the filesystem's timestamp granularity of the state
// last fingerprinted (the same inode, size and mtime): rare, since a check
// comes at least one debounce delay after the last event, but possible on
// filesystems with coarse (one or two second) timestamps. Renames and the
// Kubernetes swap always change the inode or the target path.
//
// changed means "may have changed": it should read the file, validate it,
// and keep its old state when the file is missing or invalid.
package filewatch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults of the options.
const (
	DefaultDebounce       = 100 * time.Millisecond
	DefaultPollInterval   = 2 * time.Second
	DefaultSafetyInterval = 30 * time.Second
)

// maxWaitFactor bounds, in debounce delays, how long a steady stream of
// events can hold a check back.
const maxWaitFactor = 10

// An Option changes a default of New and Watch.
type Option func(*config)

type config struct {
	debounce       time.Duration
	pollInterval   time.Duration
	safetyInterval time.Duration
	pollOnly       bool
	onError        func(error)
}

// WithDebounce sets how long the path must be quiet (no event) before it is
// checked; default [DefaultDebounce].
func WithDebounce(d time.Duration) Option { return func(c *config) { c.debounce = d } }

// WithPollInterval sets how often the path is polled while its directory is
// not watched (see the package documentation); default [DefaultPollInterval].
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithSafetyInterval sets how often the path is polled while its directory is
// watched, for the changes that no event reports; default
// [DefaultSafetyInterval].
func WithSafetyInterval(d time.Duration) Option {
	return func(c *config) { c.safetyInterval = d }
}

// WithPollingOnly does without fsnotify: the path is only polled, at the
// poll interval. For filesystems that deliver no events.
func WithPollingOnly() Option { return func(c *config) { c.pollOnly = true } }

// WithErrorHandler has the watcher report its errors (a watch lost, fsnotify
// failing, events dropped) to f, which is called from the goroutine of Run,
// never concurrently with changed, each distinct message once until the watch
// is in place again. The watcher goes on after every error: they are for the
// log.
func WithErrorHandler(f func(error)) Option { return func(c *config) { c.onError = f } }

// A Watcher watches one path. New takes the first fingerprint; Run watches.
// It holds no resource until Run, and needs no Close.
type Watcher struct {
	path     string // absolute
	dir      string // filepath.Dir(path)
	cfg      config
	baseline fingerprint
	started  atomic.Bool
}

// New returns a Watcher for path, fingerprinting what it resolves to now: Run
// reports any change made after New returns, even one made before Run
// starts. So a caller that reads the file first should call New before that
// read, then Run; the worst case is one needless call. path need not exist,
// nor its directory.
func New(path string, opts ...Option) (*Watcher, error) {
	if path == "" {
		return nil, errors.New("filewatch: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("filewatch: %w", err)
	}
	cfg := config{
		debounce:       DefaultDebounce,
		pollInterval:   DefaultPollInterval,
		safetyInterval: DefaultSafetyInterval,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.debounce <= 0 || cfg.pollInterval <= 0 || cfg.safetyInterval <= 0 {
		return nil, fmt.Errorf("filewatch: debounce %v, poll interval %v and safety interval %v must be positive",
			cfg.debounce, cfg.pollInterval, cfg.safetyInterval)
	}
	fp, _ := fingerprintOf(abs)
	return &Watcher{path: abs, dir: filepath.Dir(abs), cfg: cfg, baseline: fp}, nil
}

// Path returns the absolute path watched.
func (w *Watcher) Path() string { return w.path }

// Run calls changed (never concurrently with itself, always from the
// goroutine of Run) each time the content that the path resolves to may have
// changed: when the fingerprint of what it resolves to differs from the one
// at the previous call, or at New for the first call. A missing path is one
// fingerprint like any other, so its disappearance and its return each give
// a call. Events that come while changed runs wait for it; none is lost.
//
// Run blocks until ctx ends, then releases everything it holds and returns
// nil. It returns an error at once, without watching, if changed is nil or
// Run was called before on w.
func (w *Watcher) Run(ctx context.Context, changed func()) error {
	if changed == nil {
		return errors.New("filewatch: nil changed func")
	}
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("filewatch: Run called twice")
	}
	r := &runner{w: w, changed: changed, last: w.baseline}
	r.timer = time.NewTimer(time.Hour)
	r.timer.Stop()
	r.ticker = time.NewTicker(w.cfg.pollInterval)
	defer func() {
		r.timer.Stop()
		r.ticker.Stop()
		r.closeNotify()
	}()

	r.setup()
	r.schedule() // what changed since New
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if r.fsw != nil {
			events, errs = r.fsw.Events, r.fsw.Errors
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				r.lost(errors.New("filewatch: fsnotify closed its event channel"))
				continue
			}
			r.handle(ev)
		case err, ok := <-errs:
			if !ok {
				r.lost(errors.New("filewatch: fsnotify closed its error channel"))
				continue
			}
			// An overflow drops events; any other error may have too.
			r.report(fmt.Errorf("filewatch: watching %s: %w", w.dir, err))
			r.schedule()
		case <-r.timer.C:
			r.pending = false
			r.check()
		case <-r.ticker.C:
			r.poll()
		}
	}
}

// Watch is New followed by Run: it calls changed each time the content that
// path resolves to may have changed, until ctx ends, and then returns nil.
// See [Watcher.Run]. It fingerprints the path when it is called, so a change
// made between the caller's own first read of the file and the call is
// missed: call [New] before that read to close the gap.
func Watch(ctx context.Context, path string, changed func(), opts ...Option) error {
	w, err := New(path, opts...)
	if err != nil {
		return err
	}
	return w.Run(ctx, changed)
}

// runner is the state of one Run, owned by its goroutine.
type runner struct {
	w       *Watcher
	changed func()
	last    fingerprint

	fsw      *fsnotify.Watcher // nil: not started, or failed
	watching bool              // the directory is watched
	dirID    fileID            // its identity when the watch was added
	extraDir string            // the watched directory of the link target, if another

	timer        *time.Timer // the debounce
	pending      bool
	pendingSince time.Time
	ticker       *time.Ticker // the polls

	lastReported string
}

// setup starts fsnotify if needed and watches the directory, or leaves the
// runner polling at the poll interval.
func (r *runner) setup() {
	if r.w.cfg.pollOnly {
		return
	}
	if r.fsw == nil {
		fsw, err := fsnotify.NewWatcher()
		if err != nil {
			r.report(fmt.Errorf("filewatch: starting fsnotify, polling %s every %v: %w",
				r.w.path, r.w.cfg.pollInterval, err))
			return
		}
		r.fsw = fsw
	}
	// The identity first: if the directory is replaced between the two, the
	// next poll sees another identity and watches again.
	id, err := dirIdentity(r.w.dir)
	if err == nil {
		err = r.fsw.Add(r.w.dir)
	}
	if err != nil {
		r.report(fmt.Errorf("filewatch: cannot watch %s, polling %s every %v: %w",
			r.w.dir, r.w.path, r.w.cfg.pollInterval, err))
		return
	}
	r.dirID = id
	r.setWatching(true)
	r.lastReported = ""
	r.syncExtra()
}

// unwatch drops the watch on the directory (fsnotify may have dropped it
// already) and the one on the link target's directory.
func (r *runner) unwatch() {
	if r.fsw != nil {
		_ = r.fsw.Remove(r.w.dir)
		if r.extraDir != "" {
			_ = r.fsw.Remove(r.extraDir)
		}
	}
	r.extraDir = ""
	r.setWatching(false)
}

// lost handles a failed fsnotify watcher: close it, start another at the
// next poll.
func (r *runner) lost(err error) {
	r.report(fmt.Errorf("%w; polling %s every %v", err, r.w.path, r.w.cfg.pollInterval))
	r.closeNotify()
	r.setWatching(false)
	r.schedule()
}

func (r *runner) closeNotify() {
	if r.fsw != nil {
		_ = r.fsw.Close()
		r.fsw = nil
	}
	r.extraDir = ""
}

func (r *runner) setWatching(on bool) {
	if on == r.watching {
		return
	}
	r.watching = on
	if on {
		r.ticker.Reset(r.w.cfg.safetyInterval)
	} else {
		r.ticker.Reset(r.w.cfg.pollInterval)
	}
}

// handle schedules a check for an event that could change what the path
// resolves to.
func (r *runner) handle(ev fsnotify.Event) {
	name := filepath.Clean(ev.Name)
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	switch {
	case gone && name == r.w.dir:
		// The directory itself is gone or moved; fsnotify dropped the watch.
		r.report(fmt.Errorf("filewatch: lost the watch on %s (%v), polling %s every %v",
			r.w.dir, ev.Op, r.w.path, r.w.cfg.pollInterval))
		r.unwatch()
	case gone && name == r.extraDir:
		// fsnotify drops that watch; the check after this event watches the
		// link target's directory again if it still exists.
		r.extraDir = ""
	case gone, ev.Has(fsnotify.Create), name == r.w.path, r.last.exists && name == r.last.target:
	default:
		return // a write or chmod of another file
	}
	r.schedule()
}

// schedule (re)starts the debounce delay before a check, never delaying a
// pending check past maxWaitFactor delays.
func (r *runner) schedule() {
	now := time.Now()
	if !r.pending {
		r.pending = true
		r.pendingSince = now
	}
	d := r.w.cfg.debounce
	if left := r.pendingSince.Add(maxWaitFactor * d).Sub(now); left < d {
		d = max(left, 0)
	}
	r.timer.Reset(d)
}

// check calls changed if the fingerprint changed.
func (r *runner) check() {
	fp, ok := fingerprintOf(r.w.path)
	if !ok { // the links kept changing under us: look again once they settle
		r.schedule()
		return
	}
	if fp == r.last {
		return
	}
	r.last = fp
	r.syncExtra() // before changed, so that nothing after the read is missed
	r.changed()
}

// poll is a tick of the safety net or of the fallback: watch again if the
// watch is missing or on another directory, then look at the path.
func (r *runner) poll() {
	if !r.watching {
		r.setup()
	} else if id, err := dirIdentity(r.w.dir); err != nil || id != r.dirID {
		if err == nil {
			err = errors.New("directory replaced")
		}
		r.report(fmt.Errorf("filewatch: watching %s again: %w", r.w.dir, err))
		r.unwatch()
		r.setup()
	}
	if r.pending {
		return // a check is coming; polling again must not put it off
	}
	if fp, ok := fingerprintOf(r.w.path); !ok || fp != r.last {
		r.schedule()
	}
}

// syncExtra watches the directory of the file the path links to when it is
// not the path's own directory, so that the target edited in place is seen.
// Failures are not reported: the polls cover them.
func (r *runner) syncExtra() {
	if !r.watching {
		return
	}
	want := ""
	if r.last.exists {
		if d := filepath.Dir(r.last.target); d != r.w.dir {
			want = d
		}
	}
	if want == r.extraDir {
		return
	}
	if want != "" {
		// The same directory under another name (a link among its parents):
		// a second watch would take the first one's place in fsnotify, which
		// keeps one name per inotify watch.
		if id, err := dirIdentity(want); err != nil || (id != fileID{} && id == r.dirID) {
			want = ""
		}
	}
	if r.extraDir != "" {
		_ = r.fsw.Remove(r.extraDir)
		r.extraDir = ""
	}
	if want != "" && r.fsw.Add(want) == nil {
		r.extraDir = want
	}
}

// report passes err to the error handler unless it is the one reported last.
func (r *runner) report(err error) {
	if r.w.cfg.onError == nil || err.Error() == r.lastReported {
		return
	}
	r.lastReported = err.Error()
	r.w.cfg.onError(err)
}
