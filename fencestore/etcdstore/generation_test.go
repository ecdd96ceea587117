package etcdstore_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
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
	s := open(t, c, freshPrefix())
	t.Cleanup(func() { _ = s.Close() })
	id, err := s.Init(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	admitOK := func(token uint64) {
		t.Helper()
		if d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "orders/42", Token: token}); err != nil || !d.Admitted {
			t.Fatalf("token %d: %+v, %v", token, d, err)
		}
	}
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
	_, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "orders/42", Token: 15})
	if !errors.As(err, &lost) || !lost.Rollback || !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("token 15 on the restored member = %v, want a rollback *LostError", err)
	}
}
