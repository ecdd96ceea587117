package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// TestAdmitDeadline holds bbolt's writer lock, as a stalled disk would, and
// checks that an admission returns at its deadline and is then applied
// (indeterminate, as documented) once the writer lets go.
func TestAdmitDeadline(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "marks.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	holding := make(chan struct{})
	release := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.db.Update(func(*bolt.Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast})
	if !errors.Is(err, fencestore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Admit behind a stuck writer: err = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Admit returned after %v, want about 100ms", d)
	}

	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// The abandoned admission was queued and commits now.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mark, ok, err := s.Mark(t.Context(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if ok && mark == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("abandoned admission never committed: mark %d, %t", mark, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCloseWaitsForAbandoned checks Close does not return while an admission
// whose caller gave up is still queued, so no goroutine outlives the store.
func TestCloseWaitsForAbandoned(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "marks.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	holding := make(chan struct{})
	release := make(chan struct{})
	go func() {
		_ = s.db.Update(func(*bolt.Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 5, Compare: fencestore.AtLeast}); err == nil {
		t.Fatal("Admit behind a stuck writer succeeded")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an admission was queued", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
