package etcdstore

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultDialTimeout bounds the first connection when
// ClientOptions.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// ClientOptions are what a replica needs to reach an etcd cluster: the
// FENCE_ETCD_* variables.
type ClientOptions struct {
	// Endpoints are the members' client URLs ("http://10.0.0.1:2379",
	// "https://etcd-0.etcd:2379") or host:port pairs. The client spreads
	// requests over them and moves on from one that fails.
	Endpoints []string
	// Username and Password, when Username is set, authenticate with
	// etcd's RBAC (the user needs read and write on the key prefix's
	// range: `etcdctl role grant-permission ROLE readwrite --prefix=true
	// fence:`).
	Username, Password string
	// TLS is on when CAFile, CertFile or an https:// endpoint is given.
	// CAFile is a PEM bundle that verifies the members (the system's roots
	// when empty), read once; CertFile and KeyFile, both or neither, are
	// the client certificate for members that require one, read again at
	// each new connection when they changed (clientCertFiles).
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds the first connection and authentication. Zero
	// means DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger receives the client's own warnings. If nil, nothing is
	// logged.
	Logger *zap.Logger
}

// NewClient returns an etcd client configured as the store needs it:
// keepalive pings that notice a silent member, TLS from the files given,
// and the logger given (the client's default logs to stderr). The etcd
// client never re-sends a transaction that may have reached a member.
// Without a username it does not wait for the cluster (a store on an
// unreachable cluster fails its calls, closed, until it answers); with
// one, it authenticates before it returns, so it fails after DialTimeout
// when no member answers, as it does at once for a wrong password.
func NewClient(o ClientOptions) (*clientv3.Client, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("etcdstore: no endpoints")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("etcdstore: a client certificate needs both its certificate and its key file")
	}
	if o.Password != "" && o.Username == "" {
		return nil, errors.New("etcdstore: a password without a username")
	}
	cfg := clientv3.Config{
		Endpoints:   o.Endpoints,
		DialTimeout: o.DialTimeout,
		// A member that stops answering (a frozen host, a cut cable)
		// keeps its TCP connection; pings find it out. etcd refuses pings
		// more often than every 5s by default.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		PermitWithoutStream:  true,
		Username:             o.Username,
		Password:             o.Password,
		Logger:               o.Logger,
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	} else {
		cfg.Logger = cfg.Logger.Named("etcd-client")
	}
	https := false
	for _, ep := range o.Endpoints {
		https = https || strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://")
	}
	if https || o.CAFile != "" || o.CertFile != "" {
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("etcdstore: CA file: %w", err)
			}
			t.RootCAs = x509.NewCertPool()
			if !t.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("etcdstore: CA file %s: no PEM certificate in it", o.CAFile)
			}
		}
		if o.CertFile != "" {
			kp := &clientCertFiles{certFile: o.CertFile, keyFile: o.KeyFile, log: cfg.Logger}
			if err := kp.load(); err != nil {
				return nil, fmt.Errorf("etcdstore: client certificate: %w", err)
			}
			t.GetClientCertificate = kp.get
		}
		cfg.TLS = t
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	return c, nil
}

// clientCertFiles is the client certificate, read from its files again at
// each TLS handshake (a new connection to a member) and parsed when they
// changed. Certificates are renewed on disk (cert-manager, a Kubernetes
// Secret's swap), often for lifetimes of days; read once, the certificate
// of the process's start would be presented until it expired, and every
// connection after that (a member restarted, a network blip) would be
// refused, the store down until the sidecar restarted
// (TestClientCertRenewedOnDisk). A pair that does not read or parse (the
// key written, the certificate not yet) leaves the last good one in use,
// with a warning.
type clientCertFiles struct {
	certFile, keyFile string
	log               *zap.Logger

	mu              sync.Mutex
	certPEM, keyPEM []byte
	pair            *tls.Certificate
}

// load reads the files and, when they changed, parses them into pair.
func (k *clientCertFiles) load() error {
	certPEM, err := os.ReadFile(k.certFile)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(k.keyFile)
	if err != nil {
		return err
	}
	if k.pair != nil && bytes.Equal(certPEM, k.certPEM) && bytes.Equal(keyPEM, k.keyPEM) {
		return nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s and %s: %w", k.certFile, k.keyFile, err)
	}
	k.certPEM, k.keyPEM, k.pair = certPEM, keyPEM, &pair
	return nil
}

// get is tls.Config.GetClientCertificate.
func (k *clientCertFiles) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.load(); err != nil {
		k.log.Warn("etcd client certificate not read again; the last one read is presented", zap.Error(err))
	}
	return k.pair, nil
}
