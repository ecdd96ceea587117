package etcdstore_test

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// The generation conformance: every admission reports the revision, an
// operator's Reset and Raise set aside the floors seen before them (the
// operator's key, keeper.go), a floor seen after still heals. (A revision
// cannot be set back through the API: TestRevisionWentBack restores a
// member's data instead.)
func TestGeneration(t *testing.T) {
	c := etcdtest.Start(t)
	storetest.RunGeneration(t, func(t *testing.T) storetest.KeeperStore { return open(t, c, freshPrefix()) }, nil)
}

// An etcd member restored from a copy of its data taken earlier (as a
// snapshot restore without --bump-revision gives it): its revision went
// back, and the next admission of a store that saw the newer one fails as
// lost, with Rollback; Ping, as an idle replica's watch runs it, too.
func TestRevisionWentBack(t *testing.T) {
	c := etcdtest.Start(t)
	s, admitOK := initialized(t, c)
	admitOK(10)
	m := c.Members[0]
	backup := t.TempDir() + "/backup"
	m.Kill()
	if out, err := exec.Command("cp", "-a", m.Dir(), backup).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	m.Restart(t)
	for token := uint64(11); token <= 20; token++ {
		admitOK(token)
	}
	m.Kill()
	if err := os.RemoveAll(m.Dir()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", backup, m.Dir()).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	m.Restart(t)
	var lost *fencestore.LostError
	if err := s.Ping(ctxT(t)); !errors.As(err, &lost) || !lost.Rollback {
		t.Fatalf("Ping on the restored member = %v, want a rollback *LostError", err)
	}
	_, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "orders/42", Token: 15})
	if !errors.As(err, &lost) || !lost.Rollback || !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("token 15 on the restored member = %v, want a rollback *LostError", err)
	}
}

// etcd restored with etcd's own tool: a snapshot taken through the API at
// mark 10, `etcdutl snapshot restore` into the member's data directory
// after mark 20, the member started on it. Without --bump-revision the
// revision goes back with the marks, and a store that saw the newer one
// refuses (Ping and the admission of the stale token 15, a rollback
// *LostError). With --bump-revision (and --mark-compacted, as etcd's
// restore guide has it) the revision moves forward past everything a
// replica saw: the rollback is not seen, and 15 is admitted over the
// restored 10, the limit docs/durability.md states.
func TestSnapshotRestored(t *testing.T) {
	utl := etcdtest.Utl(t)
	for _, tc := range []struct {
		name     string
		args     []string
		detected bool
	}{
		{"restore", nil, true},
		{"restore with bump-revision", []string{"--bump-revision", "1000000", "--mark-compacted"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdtest.Start(t)
			s, admitOK := initialized(t, c)
			for token := uint64(1); token <= 10; token++ {
				admitOK(token)
			}
			snap := filepath.Join(t.TempDir(), "snapshot.db")
			saveSnapshot(t, c, snap)
			for token := uint64(11); token <= 20; token++ {
				admitOK(token)
			}
			m := c.Members[0]
			m.Kill()
			data := filepath.Join(m.Dir(), "data")
			restored := data + ".restored"
			args := append([]string{"snapshot", "restore", snap, "--data-dir", restored, "--name", m.Name,
				"--initial-cluster", m.Name + "=" + m.PeerURL(), "--initial-advertise-peer-urls", m.PeerURL()}, tc.args...)
			if out, err := exec.Command(utl, args...).CombinedOutput(); err != nil {
				t.Fatalf("etcdutl %v: %v\n%s", args, err, out)
			}
			if err := os.RemoveAll(data); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(restored, data); err != nil {
				t.Fatal(err)
			}
			m.Restart(t)
			var lost *fencestore.LostError
			err := s.Ping(ctxT(t))
			if got := errors.As(err, &lost) && lost.Rollback; got != tc.detected {
				t.Fatalf("Ping on the restored member = %v, want a rollback: %t", err, tc.detected)
			}
			d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "orders/42", Token: 15})
			if tc.detected {
				if !errors.As(err, &lost) || !lost.Rollback || !errors.Is(err, fencestore.ErrStoreLost) {
					t.Fatalf("token 15 on the restored member = %+v, %v; want a rollback *LostError", d, err)
				}
				return
			}
			if err != nil || !d.Admitted {
				t.Fatalf("token 15 after a restore with --bump-revision = %+v, %v; want it admitted (the limit: not seen)", d, err)
			}
		})
	}
}

// saveSnapshot writes the cluster's snapshot, through the API (as
// `etcdctl snapshot save` takes it), to path.
func saveSnapshot(t *testing.T, c *etcdtest.Cluster, path string) {
	t.Helper()
	rc, err := c.Client(t).Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// initialized opens a store on c under a fresh prefix, initializes it and
// expects its identity, as a replica does; admitOK admits a token for
// orders/42 or fails the test.
func initialized(t *testing.T, c *etcdtest.Cluster) (s *etcdstore.Store, admitOK func(token uint64)) {
	t.Helper()
	s = open(t, c, freshPrefix())
	t.Cleanup(func() { _ = s.Close() })
	id, err := s.Init(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	return s, func(token uint64) {
		t.Helper()
		if d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "orders/42", Token: token}); err != nil || !d.Admitted {
			t.Fatalf("token %d: %+v, %v", token, d, err)
		}
	}
}
