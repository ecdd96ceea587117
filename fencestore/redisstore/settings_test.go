package redisstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Settings reads what the server was started with, and what CONFIG SET
// changes at runtime.
func TestSettings(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru",
		"--appendonly", "yes", "--appendfsync", "everysec")
	s, _ := newStore(t, srv, redisstore.Options{})
	ctx := t.Context()
	want := redisstore.Settings{MaxmemoryPolicy: "allkeys-lru", AppendOnly: "yes", AppendFsync: "everysec", NoAppendfsyncOnRewrite: "no"}
	if got, err := s.Settings(ctx); err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("Settings = %+v, %v; want [%+v]", got, err, want)
	}
	c := srv.Client(t)
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"appendfsync", "always"}, {"appendonly", "no"}, {"no-appendfsync-on-rewrite", "yes"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want = redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "no", AppendFsync: "always", NoAppendfsyncOnRewrite: "yes"}
	if got, err := s.Settings(ctx); err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("after CONFIG SET: Settings = %+v, %v; want [%+v]", got, err, want)
	}
}

// A server that answers but refuses CONFIG GET (renamed away, or denied by
// ACL) is told apart from one that does not answer (dead, or wrong
// credentials: PING fails too), which is fencestore.ErrUnavailable.
func TestSettingsErrors(t *testing.T) {
	ctx := t.Context()
	renamed := redistest.Start(t, "--rename-command", "CONFIG", "")
	s, _ := newStore(t, renamed, redisstore.Options{})
	if got, err := s.Settings(ctx); err == nil || errors.Is(err, fencestore.ErrUnavailable) ||
		!strings.Contains(err.Error(), "CONFIG GET") {
		t.Errorf("CONFIG renamed: Settings = %+v, %v; want a refusal of CONFIG GET, not ErrUnavailable", got, err)
	}
	// Each setting's refusal quotes that setting, so that a message about
	// persistence does not quote maxmemory-policy.
	var refused *redisstore.RefusedError
	if _, err := s.Settings(ctx); !errors.As(err, &refused) {
		t.Fatalf("CONFIG renamed: %v is not a *RefusedError", err)
	}
	for _, tc := range []struct {
		names    []string
		quote    string
		notQuote string
	}{
		{[]string{"maxmemory-policy"}, "'maxmemory-policy'", "appendonly"},
		{[]string{"appendonly", "appendfsync"}, "'appendonly'", "maxmemory-policy"},
		{[]string{"appendfsync"}, "'appendfsync'", "maxmemory-policy"},
	} {
		err := refused.For(tc.names...)
		if err == nil || !strings.Contains(err.Error(), tc.quote) || strings.Contains(err.Error(), tc.notQuote) {
			t.Errorf("For(%q) = %v; want it to quote %s and not %s", tc.names, err, tc.quote, tc.notQuote)
		}
	}
	if err := refused.For("maxmemory"); err != nil {
		t.Errorf("For(a setting not read) = %v, want nil", err)
	}

	acl := redistest.Start(t)
	if _, err := redistest.Do(acl.Addr(), nil, "ACL", "SETUSER", "noconf", "on", ">pw", "~*", "+@all", "-config"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		user, pass  string
		unavailable bool
	}{{"ACL without config", "noconf", "pw", false}, {"wrong password", "noconf", "wrong", true}} {
		opts := acl.Options()
		opts.Username, opts.Password = tc.user, tc.pass
		st := redisstore.New(redis.NewClient(opts), redisstore.Options{})
		got, err := st.Settings(ctx)
		_ = st.Close()
		if err == nil || errors.Is(err, fencestore.ErrUnavailable) != tc.unavailable {
			t.Errorf("%s: Settings = %+v, %v; want an error, ErrUnavailable %t", tc.name, got, err, tc.unavailable)
		}
	}

	dead := redistest.Start(t)
	s3, _ := newStore(t, dead, redisstore.Options{})
	dead.Kill()
	if got, err := s3.Settings(ctx); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("server killed: Settings = %+v, %v; want ErrUnavailable", got, err)
	}
}

// A cluster client reads every master, including one it was not seeded
// with, each named by its address.
func TestSettingsCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	addrs := cluster.Addrs()
	if _, err := redistest.Do(addrs[2], nil, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"); err != nil {
		t.Fatal(err)
	}
	s := redisstore.New(redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs[:1], ContextTimeoutEnabled: true, MaxRetries: -1,
	}), redisstore.Options{})
	defer s.Close()
	got, err := s.Settings(t.Context())
	if err != nil || len(got) != 3 {
		t.Fatalf("Settings = %+v, %v; want 3 masters", got, err)
	}
	seen := map[string]string{}
	for _, st := range got {
		seen[st.Node] = st.MaxmemoryPolicy
	}
	for i, a := range addrs {
		want := "noeviction"
		if i == 2 {
			want = "allkeys-lfu"
		}
		if p, ok := seen[a]; !ok || p != want {
			t.Errorf("node %s: policy %q (present %t), want %q; got %+v", a, p, ok, want, got)
		}
	}
}

// What each setting can lose, in words that name the setting.
func TestSettingsRisks(t *testing.T) {
	for _, tc := range []struct {
		st          redisstore.Settings
		eviction    string // substring of EvictionRisk; "" = none
		persistence string // substring of PersistenceRisk; "" = none
	}{
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always"}, "", ""},
		{redisstore.Settings{MaxmemoryPolicy: "volatile-lru", AppendOnly: "yes", AppendFsync: "always"}, "", ""},
		{redisstore.Settings{MaxmemoryPolicy: "allkeys-lru", AppendOnly: "yes", AppendFsync: "always"},
			"maxmemory-policy is allkeys-lru", ""},
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "everysec"},
			"", "appendfsync is everysec: a crash can lose up to about a second"},
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "no"},
			"", "appendfsync is no: a crash of the Redis host loses the acknowledged marks the OS had not yet written"},
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "no", AppendFsync: "always"},
			"", "appendonly is no: a crash loses every mark written since the last RDB snapshot"},
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "sometimes"},
			"", "appendfsync is sometimes"},
		// It replies before any fsync while a child runs.
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always", NoAppendfsyncOnRewrite: "yes"},
			"", "no-appendfsync-on-rewrite is yes: while Redis has a child process"},
		{redisstore.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always", NoAppendfsyncOnRewrite: "no"}, "", ""},
	} {
		ev, pe := tc.st.EvictionRisk(), tc.st.PersistenceRisk()
		if (tc.eviction == "") != (ev == "") || !strings.Contains(ev, tc.eviction) {
			t.Errorf("%+v: EvictionRisk = %q, want %q", tc.st, ev, tc.eviction)
		}
		if (tc.persistence == "") != (pe == "") || !strings.Contains(pe, tc.persistence) {
			t.Errorf("%+v: PersistenceRisk = %q, want %q", tc.st, pe, tc.persistence)
		}
	}
}
