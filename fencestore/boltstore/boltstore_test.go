package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/boltstore"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, path string, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) fencestore.Store {
		return open(t, filepath.Join(t.TempDir(), "marks.db"), boltstore.Options{KeyPrefix: "fence:"})
	})
}

func TestKeeperConformance(t *testing.T) {
	for _, prefix := range []string{"fence:", ""} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			storetest.RunKeeper(t,
				func(t *testing.T) storetest.KeeperStore {
					return open(t, filepath.Join(t.TempDir(), "marks.db"), boltstore.Options{KeyPrefix: prefix})
				},
				func(t *testing.T, s storetest.KeeperStore) {
					if err := s.(*boltstore.Store).Clear(); err != nil {
						t.Fatal(err)
					}
				})
		})
	}
}

func TestConformanceNoPrefix(t *testing.T) {
	storetest.Run(t, func(t *testing.T) fencestore.Store {
		return open(t, filepath.Join(t.TempDir(), "marks.db"), boltstore.Options{})
	})
}

func TestReopenKeepsMarks(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "marks.db")
	s := open(t, path, boltstore.Options{KeyPrefix: "fence:"})
	for res, token := range map[string]uint64{"a": 42, "b": 1<<64 - 1, "c": 0} {
		if _, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: token, Compare: fencestore.Greater}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, boltstore.Options{KeyPrefix: "fence:"})
	defer s.Close()
	for res, want := range map[string]uint64{"a": 42, "b": 1<<64 - 1, "c": 0} {
		got, ok, err := s.Mark(ctx, res)
		if err != nil || !ok || got != want {
			t.Errorf("after reopen Mark(%q) = %d, %t, %v; want %d", res, got, ok, err, want)
		}
	}
	if d, err := s.Admit(ctx, fencestore.Admission{Resource: "a", Token: 42, Compare: fencestore.Greater}); err != nil || d.Admitted || d.Mark != 42 {
		t.Errorf("after reopen Admit(a, 42, >) = %+v, %v; want stale at 42", d, err)
	}
	// Another prefix is another namespace in the same file.
	s.Close()
	s = open(t, path, boltstore.Options{KeyPrefix: "other:"})
	defer s.Close()
	if _, ok, err := s.Mark(ctx, "a"); err != nil || ok {
		t.Errorf("Mark under another prefix: ok=%t err=%v; want absent", ok, err)
	}
}

// TestLayout checks the file holds canonical decimal text under prefix+resource,
// the same as the Redis store.
func TestLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks.db")
	s := open(t, path, boltstore.Options{KeyPrefix: "fence:"})
	for res, token := range map[string]uint64{"orders/42": 9007199254740993, "zero": 0} {
		if _, err := s.Admit(t.Context(), fencestore.Admission{Resource: res, Token: token, Compare: fencestore.AtLeast}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	got := readRaw(t, path)
	want := map[string]string{"fence:orders/42": "9007199254740993", "fence:zero": "0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("file holds %q, want %q", got, want)
	}
}

func readRaw(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("marks")).ForEach(func(k, v []byte) error {
			got[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func writeRaw(t *testing.T, path, key, value string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("marks"))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte(value))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCorruptMark(t *testing.T) {
	for _, v := range []string{"", "abc", "007", "00", "-1", "+1", " 1", "1 ", "1.5", "1e3", "18446744073709551616", "99999999999999999999", "123456789012345678901"} {
		t.Run(fmt.Sprintf("%q", v), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "marks.db")
			writeRaw(t, path, "fence:r", v)
			s := open(t, path, boltstore.Options{KeyPrefix: "fence:"})
			for _, cmp := range []fencestore.Compare{fencestore.AtLeast, fencestore.Greater} {
				d, err := s.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 1<<64 - 1, Compare: cmp})
				if !errors.Is(err, fencestore.ErrUnavailable) {
					t.Errorf("Admit over %q (%v) = %+v, %v; want ErrUnavailable", v, cmp, d, err)
				}
			}
			if _, _, err := s.Mark(t.Context(), "r"); !errors.Is(err, fencestore.ErrUnavailable) {
				t.Errorf("Mark over %q: err = %v, want ErrUnavailable", v, err)
			}
			s.Close()
			if got := readRaw(t, path)["fence:r"]; got != v {
				t.Errorf("value became %q, want it untouched (%q)", got, v)
			}
		})
	}
}

func TestLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks.db")
	s := open(t, path, boltstore.Options{})
	defer s.Close()
	// flock is per open file description, so a second Open in this process
	// stands for a second process.
	start := time.Now()
	s2, err := boltstore.Open(path, boltstore.Options{LockTimeout: 200 * time.Millisecond})
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a locked file succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second Open took %v, want about its 200ms timeout", d)
	}
	t.Logf("second Open: %v", err)
	s2, err = boltstore.Open(path, boltstore.Options{LockTimeout: -1})
	if err == nil {
		s2.Close()
		t.Fatal("second Open with no wait succeeded")
	}
	// Once released, the file opens again.
	s.Close()
	s2 = open(t, path, boltstore.Options{LockTimeout: 200 * time.Millisecond})
	s2.Close()
}

// TestBatchedAdmissions runs many admissions at once; they must all complete,
// correctly, in far fewer commits than admissions.
func TestBatchedAdmissions(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "marks.db"), boltstore.Options{})
	defer s.Close()
	const n = 400
	var wg sync.WaitGroup
	var admitted atomic.Int64
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			// Every token is distinct; under ">" exactly the admissions that
			// found a lower mark pass, and token n-1 always does.
			d, err := s.Admit(ctx, fencestore.Admission{Resource: "batched", Token: uint64(i), Compare: fencestore.Greater})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Admitted {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d concurrent admissions in %v, %d admitted", n, time.Since(start), admitted.Load())
	if got, ok, err := s.Mark(t.Context(), "batched"); err != nil || !ok || got != n-1 {
		t.Errorf("Mark = %d, %t, %v; want %d", got, ok, err, n-1)
	}
}

func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		s := open(b, filepath.Join(b.TempDir(), "marks.db"), boltstore.Options{})
		defer s.Close()
		b.ReportAllocs()
		var token uint64
		for b.Loop() {
			token++
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token, Compare: fencestore.AtLeast}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An equal token under ">=" (many requests on one lease) writes nothing
	// and commits nothing.
	b.Run("equal", func(b *testing.B) {
		s := open(b, filepath.Join(b.TempDir(), "marks.db"), boltstore.Options{})
		defer s.Close()
		if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: 7, Compare: fencestore.AtLeast}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if d, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: 7, Compare: fencestore.AtLeast}); err != nil || !d.Admitted {
				b.Fatal(d, err)
			}
		}
	})
	// Many admitters at once share commits (db.Batch): the cost per
	// admission falls far below one commit's.
	b.Run("parallel", func(b *testing.B) {
		s := open(b, filepath.Join(b.TempDir(), "marks.db"), boltstore.Options{})
		defer s.Close()
		var token atomic.Uint64
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token.Add(1), Compare: fencestore.AtLeast}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
