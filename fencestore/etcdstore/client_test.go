package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// NewClient against a member that serves only TLS and requires a client
// certificate, with etcd's RBAC on: a user whose one role may read and
// write the key prefix's range does everything the store does (admission,
// identity, barrier, keeper), and nothing outside it.
func TestClientTLSAndAuth(t *testing.T) {
	files := redistest.NewTLSFiles(t) // a CA and a 127.0.0.1 certificate usable by servers and clients
	c := etcdtest.StartConfig(t, etcdtest.Config{TLS: &etcdtest.TLS{CA: files.CA, Cert: files.Cert, Key: files.Key,
		ClientCertAuth: true, ClientCert: files.Cert, ClientKey: files.Key}})
	ctx := ctxT(t)
	admin := c.Client(t)
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "fence"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "fence", "fence:", clientv3.GetPrefixRangeEnd("fence:"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "fence", "fencepw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "fence", "fence"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("RBAC set-up: %v", err)
		}
	}
	opts := etcdstore.ClientOptions{Endpoints: c.Endpoints(), Username: "fence", Password: "fencepw",
		CAFile: files.CA, CertFile: files.Cert, KeyFile: files.Key}
	newStore := func(o etcdstore.ClientOptions, prefix string) (*etcdstore.Store, error) {
		cl, err := etcdstore.NewClient(o)
		if err != nil {
			return nil, err
		}
		s := etcdstore.New(cl, etcdstore.Options{KeyPrefix: prefix})
		t.Cleanup(func() { _ = s.Close() })
		return s, nil
	}
	a, err := newStore(opts, "fence:")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newStore(opts, "fence:")
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	a.Expect(id)
	b.Expect(id)
	older := mustAdmit(t, a, fencestore.Admission{Resource: "orders/1", Token: 1, Flight: 2 * time.Second})
	newer := mustAdmit(t, b, fencestore.Admission{Resource: "orders/1", Token: 2, Flight: time.Minute})
	if !newer.Flight.Older {
		t.Fatal("Older not set")
	}
	// Never released: the lease expires, and the look-up of an expired
	// lease is allowed to this user too.
	if exp, err := b.Drain(ctx, newer.Flight); err != nil || !exp {
		t.Fatalf("Drain = %v, %v; want expired", exp, err)
	}
	_ = older
	b.Release(newer.Flight)
	if _, _, changed, err := a.Raise(ctx, "orders/1", fencestore.Mark{Token: 5}); err != nil || !changed {
		t.Fatalf("Raise = %v, %v", changed, err)
	}
	if page, _, err := a.List(ctx, "", "", 10); err != nil || len(page) != 1 {
		t.Fatalf("List = %+v, %v", page, err)
	}
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	short := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	// Outside the role's range: refused, closed.
	other, err := newStore(opts, "other:")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Admit(short(), fencestore.Admission{Resource: "x", Token: 1}); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Fatalf("Admit outside the role's range = %v", err)
	} else {
		t.Logf("outside the role's range: %v", err)
	}
	// A wrong password, or no client certificate: nothing works.
	bad := opts
	bad.Password = "wrong"
	if s, err := newStore(bad, "fence:"); err == nil {
		_, err := s.Admit(short(), fencestore.Admission{Resource: "x", Token: 1})
		if !errors.Is(err, fencestore.ErrUnavailable) {
			t.Fatalf("Admit with a wrong password = %v", err)
		}
		t.Logf("a wrong password: %v", err)
	} else {
		t.Logf("a wrong password: %v", err)
	}
	noCert := opts
	noCert.CertFile, noCert.KeyFile = "", ""
	noCert.DialTimeout = time.Second
	if s, err := newStore(noCert, "fence:"); err == nil {
		_, err := s.Admit(short(), fencestore.Admission{Resource: "x", Token: 1})
		if !errors.Is(err, fencestore.ErrUnavailable) {
			t.Fatalf("Admit without a client certificate = %v", err)
		}
		t.Logf("no client certificate: %v", err)
	} else {
		t.Logf("no client certificate: %v", err)
	}
}

func TestNewClientOptions(t *testing.T) {
	for _, o := range []etcdstore.ClientOptions{
		{},
		{Endpoints: []string{"http://127.0.0.1:1"}, CertFile: "x.pem"},
		{Endpoints: []string{"http://127.0.0.1:1"}, Password: "pw"},
		{Endpoints: []string{"http://127.0.0.1:1"}, CAFile: "/nonexistent/ca.pem"},
	} {
		if cl, err := etcdstore.NewClient(o); err == nil {
			_ = cl.Close()
			t.Errorf("NewClient(%+v) accepted", o)
		}
	}
	// No member answers: NewClient does not wait for one, and the store
	// fails closed within each call's deadline.
	start := time.Now()
	cl, err := etcdstore.NewClient(etcdstore.ClientOptions{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("NewClient waited %v for an unreachable cluster", d)
	}
	s := etcdstore.New(cl, etcdstore.Options{KeyPrefix: "fence:"})
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "x", Token: 1}); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("Admit on an unreachable cluster = %v", err)
	}
}

// A client certificate renewed on disk is presented from the next
// connection on: the one the client started with expires, the member
// restarts (every connection is new), and the store admits again. Read
// once, the expired certificate was presented, the member refused every
// handshake, and the store stayed down until the process restarted.
func TestClientCertRenewedOnDisk(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	c := etcdtest.StartConfig(t, etcdtest.Config{TLS: &etcdtest.TLS{CA: files.CA, Cert: files.Cert, Key: files.Key,
		ClientCertAuth: true, ClientCert: files.Cert, ClientKey: files.Key}})
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	// Long enough for the first handshake on a loaded machine.
	const shortLived = 6 * time.Second
	files.Issue(t, cert, key, "fenceproxy", shortLived)
	expires := time.Now().Add(shortLived)
	cl, err := etcdstore.NewClient(etcdstore.ClientOptions{Endpoints: c.Endpoints(), CAFile: files.CA, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	s := etcdstore.New(cl, etcdstore.Options{KeyPrefix: "fence:"})
	t.Cleanup(func() { _ = s.Close() })
	mustAdmit(t, s, fencestore.Admission{Resource: "r", Token: 1})

	// Renewed, as cert-manager does before the old one expires; then the
	// old one expires and the member restarts.
	files.Issue(t, cert, key, "fenceproxy", time.Hour)
	time.Sleep(time.Until(expires) + time.Second)
	c.Members[0].Restart(t)
	etcdtest.Poll(t, 15*time.Second, "Admit(2) after the renewal and a restart", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 2})
		if err == nil && !d.Admitted {
			err = fmt.Errorf("refused: %+v", d)
		}
		return err
	})
}
