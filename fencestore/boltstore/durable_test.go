package boltstore

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// TestAnswerOnlyWhenDurable holds the committer between a commit's return
// and its being treated as durable, as a slow fdatasync would (bbolt shows a
// commit to readers before its sync returns), and checks that no admission
// that reads the new mark is answered, admitted or stale, until the commit is
// durable; and that once it is, those answers need no commit of their own.
func TestAnswerOnlyWhenDurable(t *testing.T) {
	var (
		commits atomic.Int64
		block   atomic.Bool
		entered = make(chan struct{})
		release = make(chan struct{})
	)
	testHookDurable = func() {
		commits.Add(1)
		if block.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	}
	t.Cleanup(func() { testHookDurable = nil })

	s, err := Open(filepath.Join(t.TempDir(), "marks.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock() // before Close, so a failed test does not leave the committer stuck

	type result struct {
		d   fencestore.Decision
		err error
	}
	admit := func(token uint64) <-chan result {
		ch := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: token, Compare: fencestore.AtLeast})
			ch <- result{d, err}
		}()
		return ch
	}
	want := func(name string, ch <-chan result, admitted bool) {
		t.Helper()
		r := <-ch
		if r.err != nil || r.d.Admitted != admitted || r.d.Mark != 6 {
			t.Errorf("%s = %+v, %v; want admitted=%t at mark 6", name, r.d, r.err, admitted)
		}
	}

	if r := <-admit(5); r.err != nil || !r.d.Admitted {
		t.Fatalf("Admit(5) = %+v, %v; want admitted", r.d, r.err)
	}

	// The commit of 6 returns and is held before it counts as durable.
	block.Store(true)
	advance := admit(6)
	<-entered
	if mark, ok, err := s.Mark(t.Context(), "r"); err != nil || !ok || mark != 6 {
		t.Fatalf("while the commit of 6 is held, Mark = %d, %t, %v; want 6 visible to readers", mark, ok, err)
	}

	// Both read the visible mark 6: one would be admitted by it, one refused.
	equal, stale := admit(6), admit(5)
	time.Sleep(150 * time.Millisecond)
	for name, ch := range map[string]<-chan result{"Admit(6) that advanced the mark": advance, "Admit(6), equal": equal, "Admit(5), stale": stale} {
		select {
		case r := <-ch:
			t.Errorf("%s answered (%+v, %v) before the mark it read was durable", name, r.d, r.err)
		default:
		}
	}
	if t.Failed() {
		return
	}

	unblock()
	want("Admit(6) that advanced the mark", advance, true)
	want("Admit(6), equal", equal, true)
	want("Admit(5), stale", stale, false)

	// Now the snapshot is durable: the same answers come from a read, with no
	// commit.
	n := commits.Load()
	want("Admit(6), equal, on a durable mark", admit(6), true)
	want("Admit(5), stale, on a durable mark", admit(5), false)
	if got := commits.Load(); got != n {
		t.Errorf("answers on a durable mark took %d commits, want none", got-n)
	}
}

// TestOpenIsDurable checks that Open counts the file's marks as durable, so
// an equal token is answered from a read at once, with no commit.
func TestOpenIsDurable(t *testing.T) {
	var commits atomic.Int64
	testHookDurable = func() { commits.Add(1) }
	t.Cleanup(func() { testHookDurable = nil })

	path := filepath.Join(t.TempDir(), "marks.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := commits.Load()
	if d, err := s.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err != nil || !d.Admitted || d.Mark != 5 {
		t.Errorf("after reopen Admit(5) = %+v, %v; want admitted at 5", d, err)
	}
	if got := commits.Load(); got != n {
		t.Errorf("equal token after reopen took %d commits, want none", got-n)
	}
}
