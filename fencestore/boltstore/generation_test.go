package boltstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/boltstore"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

func TestGeneration(t *testing.T) {
	storetest.RunGeneration(t,
		func(t *testing.T) storetest.KeeperStore {
			return open(t, filepath.Join(t.TempDir(), "marks.db"), boltstore.Options{KeyPrefix: "fence:"})
		},
		func(t *testing.T, s storetest.KeeperStore, to uint64) {
			if err := s.(*boltstore.Store).Restore(to); err != nil {
				t.Fatal(err)
			}
		})
}

// copyFile copies a closed bolt file, as an operator's backup does.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// establish does what serve does at start: read the identity and expect it.
func establish(t *testing.T, s *boltstore.Store) string {
	t.Helper()
	id, err := s.Identity(ctxT(t))
	if err != nil || id == "" {
		t.Fatalf("Identity = %q, %v", id, err)
	}
	s.Expect(id)
	return id
}

// A bolt file copied back from a backup, the process restarted on it: the
// first admission fails as gone back in time (the generation file beside
// the store remembers the newer generation), and token 15, superseded by
// 20 after the backup, is never admitted. Without that file (the control:
// a process that remembers nothing across a restart) 15 is admitted.
func TestRestoredFromBackup(t *testing.T) {
	for _, tc := range []struct {
		name     string
		genFile  string
		detected bool
	}{{"generation file", "", true}, {"control: no generation file", "-", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, backup := filepath.Join(dir, "marks.db"), filepath.Join(dir, "backup.db")
			opts := boltstore.Options{KeyPrefix: "fence:", GenerationFile: tc.genFile}
			s := open(t, path, opts)
			id, err := s.Init(ctxT(t), false)
			if err != nil {
				t.Fatal(err)
			}
			s.Expect(id)
			admitOK(t, s, "orders/42", 10)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			copyFile(t, path, backup)

			s = open(t, path, opts)
			establish(t, s)
			admitOK(t, s, "orders/42", 20)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			copyFile(t, backup, path)

			s = open(t, path, opts)
			t.Cleanup(func() { _ = s.Close() })
			establish(t, s)
			d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "orders/42", Token: 15})
			var lost *fencestore.LostError
			switch {
			case tc.detected && (!errors.As(err, &lost) || !lost.Rollback):
				t.Fatalf("token 15 on the restored file = %+v, %v; want a rollback *LostError", d, err)
			case !tc.detected && (err != nil || !d.Admitted):
				t.Fatalf("control: token 15 on the restored file = %+v, %v; want it admitted (nothing remembered)", d, err)
			}
		})
	}
}

func admitOK(t *testing.T, s fencestore.Store, resource string, token uint64) fencestore.Decision {
	t.Helper()
	d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: resource, Token: token})
	if err != nil || !d.Admitted {
		t.Fatalf("Admit(%s, %d) = %+v, %v", resource, token, d, err)
	}
	return d
}

// The identity is bound to the key prefix: a deployment that changes its
// prefix finds no identity record (a new store, which FENCE_STORE_INIT
// decides on) instead of the old prefix's, over marks it never kept. A
// file written before records were bound takes its record up for the one
// prefix all its marks are under, and for no other.
func TestIdentityBoundToPrefix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "marks.db")
	s := open(t, path, boltstore.Options{KeyPrefix: "fence:"})
	id, err := s.Init(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	admitOK(t, s, "orders/42", 20)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, boltstore.Options{KeyPrefix: "fence2:"})
	if got, err := s.Identity(ctxT(t)); err != nil || got != "" {
		t.Fatalf("Identity under another prefix = %q, %v; want none", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A file of the older layout: one unbound record.
	legacy := filepath.Join(dir, "legacy.db")
	db, err := bolt.Open(legacy, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		m, _ := tx.CreateBucketIfNotExists([]byte("meta"))
		if err := m.Put([]byte("identity"), []byte("abc")); err != nil {
			return err
		}
		b, _ := tx.CreateBucketIfNotExists([]byte("marks"))
		return b.Put([]byte("fence:orders/42"), []byte("20"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ prefix, want string }{{"other:", ""}, {"fence:", "abc"}} {
		s := open(t, legacy, boltstore.Options{KeyPrefix: tc.prefix})
		got, err := s.Identity(ctxT(t))
		_ = s.Close()
		if err != nil || got != tc.want {
			t.Fatalf("legacy file under %q: Identity = %q, %v; want %q", tc.prefix, got, err, tc.want)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}
