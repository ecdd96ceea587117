package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSFiles are a test CA and a server certificate it signed, for the IP
// address 127.0.0.1, as PEM files.
type TLSFiles struct {
	CA   string // the CA certificate (what a client trusts)
	Cert string // the server certificate
	Key  string // the server's private key (PKCS #8)
	Pool *x509.CertPool

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewTLSFiles mints an ECDSA P-256 CA and a server certificate with the SAN
// IP 127.0.0.1, valid for an hour, and writes them to t.TempDir().
func NewTLSFiles(t testing.TB) *TLSFiles {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fenceproxy test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	f := &TLSFiles{
		CA:     filepath.Join(dir, "ca.pem"),
		Cert:   filepath.Join(dir, "server.pem"),
		Key:    filepath.Join(dir, "server-key.pem"),
		Pool:   x509.NewCertPool(),
		caCert: caCert,
		caKey:  caKey,
		serial: 1,
	}
	f.Pool.AddCert(caCert)
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	// Client auth too: redis uses the same certificate for its outgoing
	// TLS connections (replication, cluster bus).
	f.Issue(t, f.Cert, f.Key, "redis-server", time.Hour)
	return f
}

// Issue writes a certificate the test CA signs, for server and client
// auth and the SAN IP 127.0.0.1, valid from a minute ago for validFor, to
// certFile, and its private key (PKCS #8) to keyFile. Each file is
// written beside its place and renamed over it, as a renewal swaps it.
func (f *TLSFiles) Issue(t testing.TB, certFile, keyFile, name string, validFor time.Duration) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(f.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.caCert, &key.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", pkcs8)
	writePEM(t, certFile, "CERTIFICATE", der)
}

// writePEM writes one PEM block to path: to a file beside it, renamed
// over it.
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ClientConfig is a TLS client configuration that trusts only the test CA.
func (f *TLSFiles) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: f.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// TLSServer is a redis-server that speaks only TLS (--port 0): its Addr is
// the TLS port.
type TLSServer struct {
	*Server
	Files *TLSFiles
}

// StartTLS starts a redis-server whose only listener is TLS on a free
// 127.0.0.1 port, with the certificate of files, not asking clients for
// certificates (--tls-auth-clients no), and args as Start takes them. It
// waits until a PING over TLS, verified against the test CA, answers.
func StartTLS(t testing.TB, files *TLSFiles, args ...string) *TLSServer {
	t.Helper()
	conf := files.ClientConfig()
	s := launch(t, "", func(port int, dir string) []string {
		a := append([]string{"--save", "", "--appendonly", "no"}, args...)
		a = append(a, FixedArgs(port, dir)...)
		return append(a, tlsListen(files, port)...)
	}, func(addr string) error { return tlsPing(addr, conf) })
	return &TLSServer{Server: s, Files: files}
}

// tlsListen closes the plain port and serves TLS on port; it comes after
// FixedArgs, which opens the plain one.
func tlsListen(files *TLSFiles, port int) []string {
	return []string{"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", files.Cert, "--tls-key-file", files.Key,
		"--tls-ca-cert-file", files.CA, "--tls-auth-clients", "no"}
}

// StartTLSSentinel starts one sentinel that speaks only TLS, with master's
// certificate files, monitoring master under name (quorum 1) and reaching
// it over TLS too (--tls-replication yes). It waits until the sentinel, asked
// over TLS, names master.
func StartTLSSentinel(t testing.TB, name string, master *TLSServer) *TLSServer {
	t.Helper()
	files := master.Files
	conf := files.ClientConfig()
	dir := t.TempDir()
	confFile := filepath.Join(dir, "sentinel.conf")
	s := launch(t, dir, func(port int, dir string) []string {
		// A sentinel rewrites its config file, so each attempt starts from
		// a fresh one, which must come first on the command line.
		text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", name, master.Port())
		if err := os.WriteFile(confFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		a := append([]string{confFile, "--sentinel"}, FixedArgs(port, dir)...)
		return append(append(a, tlsListen(files, port)...), "--tls-replication", "yes")
	}, func(addr string) error { return tlsPing(addr, conf) })
	want := fmt.Sprint([]any{"127.0.0.1", strconv.Itoa(master.Port())})
	Poll(t, 10*time.Second, "TLS sentinel "+s.Addr()+" names its master", func() error {
		r, err := Do(s.Addr(), &redis.Options{TLSConfig: conf}, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
		if err != nil {
			return err
		}
		if got := fmt.Sprint(r); got != want {
			return fmt.Errorf("names %s, want %s", got, want)
		}
		return nil
	})
	return &TLSServer{Server: s, Files: files}
}

func tlsPing(addr string, conf *tls.Config) error {
	d := &net.Dialer{Timeout: time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, conf)
	if err != nil {
		return err
	}
	defer c.Close()
	line, err := rawCommand(c, "PING")
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// URL returns rediss://127.0.0.1:port/0.
func (s *TLSServer) URL() string { return "rediss://" + s.Addr() + "/0" }

// Options returns client options for the server over TLS, trusting the test
// CA.
func (s *TLSServer) Options() *redis.Options {
	o := s.Server.Options()
	o.TLSConfig = s.Files.ClientConfig()
	return o
}

// Client returns a TLS client of the server, closed when the test ends.
func (s *TLSServer) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}
