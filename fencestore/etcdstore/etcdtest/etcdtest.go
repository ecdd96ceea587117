// Package etcdtest starts real etcd processes for tests: one member, or a
// cluster of several, each listening for clients and peers on free
// 127.0.0.1 ports, keeping its data in the test's temporary directory,
// running in its own process group, and stopped by its PID when the test
// ends; a member can be killed (SIGKILL), frozen (SIGSTOP), resumed and
// restarted on its data, by its PID, never by name. A member is killed by
// the kernel too if the process that started it dies (Linux), so a killed
// test leaves nothing on its ports.
//
// The binary is $FENCE_ETCD_BIN, else etcd on PATH (install-etcd.sh beside
// this file installs the version the tests are written against). When
// there is none the test fails with the command that installs it, unless
// FENCE_SKIP_ETCD is set (to anything), which skips it: CI cannot skip
// silently.
//
// The same code serves callers that are not tests (the fault harness in
// faults/): FindBin, Launch, Cluster.Stop, Cluster.Dial,
// Cluster.WaitLeader, Member.Relaunch and Until return errors, and the
// functions that take a testing.TB (Bin, Start, StartCluster, StartConfig,
// Client, NewClient, Leader, Restart, Poll) call them and end the test on
// an error.
package etcdtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/childproc"
	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

const (
	// startTimeout bounds the wait for a new cluster (or a restarted
	// member) to report itself healthy: a leader elected, requests served.
	startTimeout = 30 * time.Second
	// stopTimeout bounds the wait after SIGTERM before SIGKILL.
	stopTimeout = 5 * time.Second
)

// ErrNotFound is FindBin's error when there is no etcd binary.
var ErrNotFound = errors.New("etcd not found: bash fencestore/etcdstore/etcdtest/install-etcd.sh installs it " +
	"(or set FENCE_ETCD_BIN; FENCE_SKIP_ETCD=1 skips the etcd tests)")

// FindBin returns the etcd binary: $FENCE_ETCD_BIN, else etcd on PATH, else
// ErrNotFound.
func FindBin() (string, error) {
	if bin := os.Getenv("FENCE_ETCD_BIN"); bin != "" {
		return bin, nil
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return "", ErrNotFound
	}
	return bin, nil
}

// MaySkip reports whether FENCE_SKIP_ETCD is set: a caller that finds no
// etcd binary then skips what needs it (visibly), instead of failing.
func MaySkip() bool { return os.Getenv("FENCE_SKIP_ETCD") != "" }

// Bin returns the etcd binary, or ends the test (see the package doc).
func Bin(t testing.TB) string {
	t.Helper()
	bin, err := FindBin()
	if err != nil {
		if MaySkip() {
			t.Skip("etcd not found (FENCE_SKIP_ETCD is set): bash fencestore/etcdstore/etcdtest/install-etcd.sh installs it")
		}
		t.Fatal(err)
	}
	return bin
}

// ErrUtlNotFound is FindUtl's error when there is no etcdutl binary.
var ErrUtlNotFound = errors.New("etcdutl not found: bash fencestore/etcdstore/etcdtest/install-etcd.sh installs it beside etcd " +
	"(or set FENCE_ETCDUTL_BIN; FENCE_SKIP_ETCD=1 skips the etcd tests)")

// FindUtl returns the etcdutl binary (etcd's offline tool: snapshot
// restore): $FENCE_ETCDUTL_BIN, else etcdutl beside the etcd binary, else
// on PATH, else ErrUtlNotFound.
func FindUtl() (string, error) {
	if bin := os.Getenv("FENCE_ETCDUTL_BIN"); bin != "" {
		return bin, nil
	}
	if etcd, err := FindBin(); err == nil {
		beside := filepath.Join(filepath.Dir(etcd), "etcdutl")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	bin, err := exec.LookPath("etcdutl")
	if err != nil {
		return "", ErrUtlNotFound
	}
	return bin, nil
}

// Utl returns the etcdutl binary, or ends the test as Bin does.
func Utl(t testing.TB) string {
	t.Helper()
	bin, err := FindUtl()
	if err != nil {
		if MaySkip() {
			t.Skip("etcdutl not found (FENCE_SKIP_ETCD is set): bash fencestore/etcdstore/etcdtest/install-etcd.sh installs it")
		}
		t.Fatal(err)
	}
	return bin
}

// Member is one etcd process of a Cluster.
type Member struct {
	Name       string
	clientPort int
	peerPort   int
	dir        string
	args       []string
	tls        *TLS
	proc       *childproc.Proc
}

// TLS makes the members serve clients over TLS only (https:// client
// URLs; peers stay plain): Cert and Key are the server's certificate and
// key (for the IP 127.0.0.1), CA the PEM bundle that signed it. With
// ClientCertAuth the members require a client certificate signed by CA;
// ClientCert and ClientKey are then the one the package's own checks
// (health, status) present.
type TLS struct {
	CA, Cert, Key         string
	ClientCertAuth        bool
	ClientCert, ClientKey string
}

// Config describes a cluster for StartConfig and Launch.
type Config struct {
	Members int  // how many; 0 means 1
	TLS     *TLS // nil: plain http
	Args    []string
	// Bin is the etcd binary; empty: FindBin's (Launch), Bin's
	// (StartConfig).
	Bin string
	// Dir is where the members' directories are made (each start attempt
	// makes new ones). Launch needs it; StartConfig uses the test's
	// temporary directory when it is empty.
	Dir string
}

// Cluster is a set of members started together.
type Cluster struct {
	Members []*Member
}

// Start starts a single-member cluster. args are added to its command
// line (they may override the defaults; see StartCluster).
func Start(t testing.TB, args ...string) *Cluster {
	t.Helper()
	return StartCluster(t, 1, args...)
}

// StartCluster starts n members that form one new cluster, and waits until
// every member reports itself healthy. Each member runs with
// --logger zap --log-level warn, its log in its directory (etcd.log),
// then args. A start that fails (a free port taken meanwhile) is tried
// again on other ports, twice.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	return StartConfig(t, Config{Members: n, Args: args})
}

// StartConfig starts a cluster as StartCluster does, as cfg describes,
// and stops it when the test ends.
func StartConfig(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Bin == "" {
		cfg.Bin = Bin(t)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	c, err := Launch(cfg)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Launch starts a cluster as cfg describes (the members as StartCluster
// starts them, each in a new directory under cfg.Dir) and waits until
// every member reports itself healthy. A start that fails (a free port
// taken meanwhile) is tried again on other ports, twice. The caller stops
// the cluster (Stop).
func Launch(cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdtest: Launch needs Config.Dir")
	}
	if cfg.Bin == "" {
		bin, err := FindBin()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	if cfg.Members <= 0 {
		cfg.Members = 1
	}
	var lastErr error
	for range 3 {
		c, err := tryCluster(cfg)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryCluster(cfg Config) (*Cluster, error) {
	var tok [6]byte
	_, _ = rand.Read(tok[:])
	c := &Cluster{}
	var initial []string
	for i := range cfg.Members {
		cp, err1 := freeport.Port()
		pp, err2 := freeport.Port()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		name := "m" + strconv.Itoa(i)
		dir, err := os.MkdirTemp(cfg.Dir, "etcd-"+name+"-")
		if err != nil {
			return nil, err
		}
		m := &Member{Name: name, clientPort: cp, peerPort: pp, dir: dir, tls: cfg.TLS}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL())
	}
	for _, m := range c.Members {
		m.args = append([]string{
			"--name", m.Name,
			"--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.Endpoint(),
			"--advertise-client-urls", m.Endpoint(),
			"--listen-peer-urls", m.PeerURL(),
			"--initial-advertise-peer-urls", m.PeerURL(),
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "etcdtest-" + hex.EncodeToString(tok[:]),
			"--logger", "zap", "--log-level", "warn", "--log-outputs", "stderr",
		}, m.tlsArgs()...)
		m.args = append(m.args, cfg.Args...)
		m.proc = &childproc.Proc{Name: "etcd " + m.Name, Bin: cfg.Bin, Args: m.args, Dir: m.dir,
			Log: filepath.Join(m.dir, "etcd.log"), KillWithParent: true}
		if err := m.proc.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := m.waitHealthy(); err != nil {
			c.Stop()
			return nil, fmt.Errorf("etcd %s: %w\n%s", m.Name, err, m.proc.LogTail(3000))
		}
	}
	return c, nil
}

// Stop ends every member still running (SIGTERM, and SIGKILL after 5s),
// by its PID, one after the other, and returns when they have exited.
// (Stopped all at once, the members each wait for the others until the
// SIGKILL: measured, 5s against 1 to 2s one by one.)
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.proc != nil {
			m.proc.Term(stopTimeout)
		}
	}
}

// Endpoints returns the members' client URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// Client returns a client of every member (Dial), closed when the test
// ends if nothing closed it before (a store closes the client it was
// given).
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cl, err := c.Dial()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Dial returns a client of the given members (every member when none is
// given), with the cluster's TLS and no logging. The caller closes it.
func (c *Cluster) Dial(members ...*Member) (*clientv3.Client, error) {
	if len(members) == 0 {
		members = c.Members
	}
	eps := make([]string, len(members))
	for i, m := range members {
		eps[i] = m.Endpoint()
	}
	tc, err := members[0].clientTLS()
	if err != nil {
		return nil, err
	}
	return dial(eps, tc)
}

func dial(endpoints []string, tc *tls.Config) (*clientv3.Client, error) {
	cl, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tc})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cl, nil
}

// NewClient returns a client of the given plain-http endpoints with no
// logging, closed when the test ends.
func NewClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cl, err := dial(endpoints, nil)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Leader returns the member that is leader now, as the running members
// report it, waiting up to timeout for one to be elected (WaitLeader).
func (c *Cluster) Leader(t testing.TB, timeout time.Duration) *Member {
	t.Helper()
	m, err := c.WaitLeader(timeout)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return m
}

// WaitLeader returns the member that is leader now: a running member whose
// status (etcd's maintenance Status call) names itself leader. It asks
// every 20ms until one does, for up to timeout. A member that was killed
// is not asked; a frozen one does not answer.
func (c *Cluster) WaitLeader(timeout time.Duration) (*Member, error) {
	var leader *Member
	err := Until(timeout, "a leader", func() error {
		for _, m := range c.Members {
			if m.proc.Exited() {
				continue
			}
			st, err := m.status()
			if err != nil {
				continue
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				leader = m
				return nil
			}
		}
		return errors.New("no running member is leader")
	})
	return leader, err
}

func (m *Member) status() (*clientv3.StatusResponse, error) {
	tc, err := m.clientTLS()
	if err != nil {
		return nil, err
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Endpoint()}, DialTimeout: time.Second, Logger: zap.NewNop(), TLS: tc})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cl.Status(ctx, m.Endpoint())
}

// Endpoint returns the member's client URL, http://127.0.0.1:port
// (https:// with TLS).
func (m *Member) Endpoint() string {
	if m.tls != nil {
		return "https://127.0.0.1:" + strconv.Itoa(m.clientPort)
	}
	return "http://127.0.0.1:" + strconv.Itoa(m.clientPort)
}

func (m *Member) tlsArgs() []string {
	if m.tls == nil {
		return nil
	}
	a := []string{"--cert-file", m.tls.Cert, "--key-file", m.tls.Key, "--trusted-ca-file", m.tls.CA}
	if m.tls.ClientCertAuth {
		a = append(a, "--client-cert-auth")
	}
	return a
}

// clientTLS is the configuration the package's own checks use.
func (m *Member) clientTLS() (*tls.Config, error) {
	if m.tls == nil {
		return nil, nil
	}
	pem, err := os.ReadFile(m.tls.CA)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	c.RootCAs.AppendCertsFromPEM(pem)
	if m.tls.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(m.tls.ClientCert, m.tls.ClientKey)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// PeerURL returns the member's peer URL.
func (m *Member) PeerURL() string { return "http://127.0.0.1:" + strconv.Itoa(m.peerPort) }

// Dir returns the member's directory (its data under data/, etcd.log).
func (m *Member) Dir() string { return m.dir }

// Pid returns the PID of the member's process now running (or last run).
func (m *Member) Pid() int { return m.proc.Pid() }

// Running reports whether the member's process runs (a frozen one too).
func (m *Member) Running() bool { return !m.proc.Exited() }

// Kill sends SIGKILL and waits for the process to exit, as a crash ends it.
func (m *Member) Kill() {
	_ = m.proc.Kill() // an error means it had already exited
	<-m.proc.Done()
}

// Stop freezes the member (SIGSTOP): its connections stay open and nothing
// answers, as with a stalled host.
func (m *Member) Stop() { _ = m.proc.Stop() }

// Cont resumes a member frozen by Stop.
func (m *Member) Cont() { _ = m.proc.Cont() }

// Restart starts the member again on its ports, data and arguments
// (Relaunch), or ends the test.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	if err := m.Relaunch(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
}

// Relaunch starts the member again on its ports, data and arguments (it
// rejoins its cluster from its data directory), stopping it first if it
// runs, and waits until it reports itself healthy.
func (m *Member) Relaunch() error {
	m.proc.Term(stopTimeout)
	if err := m.proc.Start(); err != nil {
		return fmt.Errorf("restart %s: %w", m.Name, err)
	}
	if err := m.waitHealthy(); err != nil {
		return fmt.Errorf("restart %s: %w\n%s", m.Name, err, m.proc.LogTail(3000))
	}
	return nil
}

// LogTail returns the last n bytes of the member's log.
func (m *Member) LogTail(n int) string { return m.proc.LogTail(n) }

// Healthy asks the member's /health endpoint, which answers true once the
// member has a leader and serves requests.
func (m *Member) Healthy() error {
	tc, err := m.clientTLS()
	if err != nil {
		return err
	}
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: tc}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Second}
	resp, err := hc.Get(m.Endpoint() + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("/health: %w: %q", err, body)
	}
	if h.Health != "true" {
		return fmt.Errorf("/health: %s %s", h.Health, h.Reason)
	}
	return nil
}

func (m *Member) waitHealthy() error {
	deadline := time.Now().Add(startTimeout)
	for {
		if m.proc.Exited() {
			return errors.New("exited before it was healthy")
		}
		err := m.Healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy within %v: %w", startTimeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Poll calls cond every 20ms until it returns nil or timeout passes, and
// then fails the test with what, the last error and the time waited
// (Until).
func Poll(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Until(timeout, what, cond); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
}

// Until calls cond every 20ms until it returns nil, or timeout passes: then
// it returns an error with what, the time waited and cond's last error.
func Until(timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	t0 := time.Now()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v: %w", what, time.Since(t0).Round(time.Millisecond), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
