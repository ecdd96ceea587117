package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// The key commands: `fenceproxy token keygen` makes a signing key, `fenceproxy
// token sign` mints one signed token with it (for scripts, tests and an
// operator's one-off write; a lease service mints its own, see
// client/redislease). Neither reads the FENCE_* environment nor contacts
// anything.

const tokenUsage = `usage: fenceproxy token keygen [flags] --private FILE --public FILE
       fenceproxy token sign [flags] --key FILE --fence N

keygen writes a new signing key: the private JWK (for the lease service,
mode 0600) and the JWK Set that verifies it (for FENCE_TOKEN_KEYS_FILE).
sign prints one signed token (a compact JWS) for fence N on stdout.
Each takes -h for its flags. Flags go before any argument; neither takes
arguments.`

const keygenUsage = `usage: fenceproxy token keygen [--kind EdDSA|ES256|HS256] [--kid ID] [--force] [-o text|json] --private FILE --public FILE

Writes a new signing key: the private JWK to --private (mode 0600) and the
JWK Set the proxies verify with to --public (mode 0644; with HS256 the set
holds the shared secret itself, so it is written 0600 too). Existing files
are kept unless --force.`

const signUsage = `usage: fenceproxy token sign [--res RESOURCE|PREFIX*] [--ttl 5m] [--nbf-now] [-o text|json] --key FILE --fence N

Prints a signed token (a compact JWS) for fencing token N, valid for --ttl
from now, on stdout: send it as the token header. Without --res it is valid
for every resource.`

// tokenCmd runs `fenceproxy token ...`.
func tokenCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{tokenUsage}
	}
	op, args := args[0], args[1:]
	switch op {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, tokenUsage)
		return nil
	case "keygen":
		return tokenKeygen(args, stdout, stderr)
	case "sign":
		return tokenSign(args, stdout)
	}
	return &usageError{fmt.Sprintf("unknown token command %q\n%s", op, tokenUsage)}
}

// keyKinds are keygen's --kind values, spelled as the algorithms they sign
// with.
var keyKinds = []string{fencejwt.KindEdDSA, fencejwt.KindES256, fencejwt.KindHS256}

// File modes of keygen's output. The private key and an HS256 set are
// secrets: only their owner reads them. An EdDSA or ES256 set is public.
const (
	secretMode = 0o600
	publicMode = 0o644
)

func tokenKeygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token keygen", flag.ContinueOnError)
	kind := fs.String("kind", fencejwt.KindEdDSA, "key kind: EdDSA (Ed25519), ES256 (P-256) or HS256 (a shared secret)")
	kid := fs.String("kid", "", "key id that tokens name the key by (default: today's date and a random suffix, e.g. 20260514-9f2c1ab0)")
	private := fs.String("private", "", "file to write the private JWK to (mode 0600); required")
	public := fs.String("public", "", "file to write the JWK Set to, for FENCE_TOKEN_KEYS_FILE (mode 0644; 0600 for HS256); required")
	force := fs.Bool("force", false, "replace --private and --public if they exist")
	output := fs.String("o", "text", "output: text or json")
	if helped, err := parseFlags(fs, args, keygenUsage, stdout); helped || err != nil {
		return err
	}
	bad := func(format string, a ...any) error {
		return &usageError{fmt.Sprintf("token keygen: "+format+"\n%s", append(a, flagsUsage(fs, keygenUsage))...)}
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q: keygen takes flags only", fs.Arg(0))
	}
	if *output != "text" && *output != "json" {
		return bad("-o must be text or json")
	}
	k, ok := canonicalKind(*kind)
	if !ok {
		return bad("--kind %q: use EdDSA, ES256 or HS256", *kind)
	}
	if flagSet(fs, "kid") {
		if err := checkKID(*kid); err != nil {
			return bad("--kid %q: %v", *kid, err)
		}
	} else {
		*kid = newKID(time.Now())
	}
	switch {
	case *private == "":
		return bad("--private FILE is required")
	case *public == "":
		return bad("--public FILE is required")
	case samePath(*private, *public):
		return bad("--private and --public are the same file %q: the private key must never be published", *private)
	}

	priv, set, err := fencejwt.NewKey(k, *kid)
	if err != nil {
		return fmt.Errorf("token keygen: %w", err)
	}
	setMode := os.FileMode(publicMode)
	if k == fencejwt.KindHS256 {
		// A symmetric key verifies and signs alike: whoever reads the set
		// can mint tokens, so it is as secret as the private file.
		setMode = secretMode
	}
	if err := writeKeyFiles(*force, keyFile{*private, priv, secretMode}, keyFile{*public, set, setMode}); err != nil {
		return fmt.Errorf("token keygen: %w", err)
	}
	if k == fencejwt.KindHS256 {
		fmt.Fprintf(stderr, "fenceproxy: HS256: %s holds the shared secret, not a public key: anyone who reads it can mint tokens. "+
			"It was written with mode 0600; give it to the proxies from a Secret, never a ConfigMap.\n", *public)
	}
	return printOut(stdout, *output, map[string]string{"kind": k, "kid": *kid, "private": *private, "public": *public},
		func(w io.Writer) {
			fmt.Fprintf(w, "wrote %s private key (kid %s) to %s (mode %04o): give it to the lease service\n", k, *kid, *private, secretMode)
			fmt.Fprintf(w, "wrote the JWK Set to %s (mode %04o): the proxies' FENCE_TOKEN_KEYS_FILE\n", *public, setMode)
		})
}

func tokenSign(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("token sign", flag.ContinueOnError)
	keyPath := fs.String("key", "", "the private JWK file (keygen's --private); required")
	fence := fs.String("fence", "", "the fencing token, a canonical decimal uint64; required")
	res := fs.String("res", "", "the resource the token is valid for, or a prefix ending in '*' (default: every resource)")
	ttl := fs.Duration("ttl", 5*time.Minute, "how long the token is valid from now")
	nbfNow := fs.Bool("nbf-now", false, "add nbf (not before) = now")
	output := fs.String("o", "text", "output: text (the token alone) or json")
	if helped, err := parseFlags(fs, args, signUsage, stdout); helped || err != nil {
		return err
	}
	bad := func(format string, a ...any) error {
		return &usageError{fmt.Sprintf("token sign: "+format+"\n%s", append(a, flagsUsage(fs, signUsage))...)}
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q: sign takes flags only", fs.Arg(0))
	}
	if *output != "text" && *output != "json" {
		return bad("-o must be text or json")
	}
	if *keyPath == "" {
		return bad("--key FILE is required")
	}
	if *fence == "" {
		return bad("--fence N is required")
	}
	n, ok := fencestore.ParseMark(*fence)
	if !ok {
		return bad("--fence %q is not a canonical decimal uint64 (0 to 18446744073709551615, digits only, no leading zeros)", *fence)
	}
	if flagSet(fs, "res") {
		if err := checkRes(*res); err != nil {
			return bad("--res %q: %v", *res, err)
		}
	}
	if *ttl <= 0 {
		return bad("--ttl %s: must be positive (a signed token must expire)", *ttl)
	}

	data, err := readKeyFile(*keyPath)
	if err != nil {
		return fmt.Errorf("token sign: --key %w", err)
	}
	signer, err := fencejwt.ParseSigningKey(data)
	if err != nil {
		if isKeySet(data) {
			return fmt.Errorf("token sign: --key %s is a JWK Set (keygen's --public file); sign needs the private JWK (keygen's --private file)", *keyPath)
		}
		return fmt.Errorf("token sign: --key %s: %w", *keyPath, err)
	}
	now := time.Now()
	exp := now.Add(*ttl)
	c := fencejwt.Claims{Fence: n, Expiry: exp, Resource: *res}
	if *nbfNow {
		c.NotBefore = now
	}
	tok, err := signer.Sign(c)
	if err != nil {
		return fmt.Errorf("token sign: %w", err)
	}
	// What the token says, as the verifier reads it: Sign rounds exp up to
	// a whole second and nbf down.
	if exp.Nanosecond() > 0 {
		exp = exp.Truncate(time.Second).Add(time.Second)
	}
	out := map[string]string{
		"token": tok, "kid": signer.KID(), "fence": *fence,
		"exp": exp.UTC().Format(time.RFC3339),
	}
	if *res != "" {
		out["res"] = *res
	}
	if *nbfNow {
		out["nbf"] = now.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	return printOut(stdout, *output, out, func(w io.Writer) { fmt.Fprintln(w, tok) })
}

// isKeySet reports whether data looks like a JWK Set, the likeliest wrong
// file to give sign.
func isKeySet(data []byte) bool {
	var set struct {
		Keys json.RawMessage `json:"keys"`
	}
	return json.Unmarshal(data, &set) == nil && set.Keys != nil
}

func canonicalKind(s string) (string, bool) {
	for _, k := range keyKinds {
		if strings.EqualFold(s, k) {
			return k, true
		}
	}
	return "", false
}

// flagSet reports whether the flag called name was given, so that an
// explicit empty value can be told from the default.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// maxKIDLen keeps a kid short: it travels in every token's header.
const maxKIDLen = 64

// checkKID accepts printable ASCII without spaces: a kid is written into
// JSON, quoted in logs and problem details, and typed by operators, and
// none of those should have to think about escapes.
func checkKID(kid string) error {
	if kid == "" || len(kid) > maxKIDLen {
		return fmt.Errorf("use 1 to %d characters", maxKIDLen)
	}
	for i := 0; i < len(kid); i++ {
		if kid[i] <= ' ' || kid[i] > '~' {
			return fmt.Errorf("character %q: use printable ASCII without spaces", kid[i])
		}
	}
	return nil
}

// newKID is the default kid: the date, so that an operator rotating keys
// can tell old from new, and a random suffix, so that two keys made the
// same day differ.
func newKID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read aborts the program instead
	return now.UTC().Format("20060102") + "-" + hex.EncodeToString(b[:])
}

// checkRes refuses a res the verifier would refuse (empty) or read
// otherwise than the caller likely meant: only a final '*' makes a prefix,
// so one elsewhere would be a literal character of a resource name.
func checkRes(res string) error {
	switch {
	case res == "":
		return errors.New("empty; leave --res out for a token valid for every resource")
	case strings.Contains(strings.TrimSuffix(res, "*"), "*"):
		return errors.New("'*' is a wildcard only at the end (a prefix), e.g. orders/*")
	}
	return nil
}

// samePath reports whether a and b name one file, as far as their paths
// tell (a hard link or symlink to the same file is not seen).
func samePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return aa == bb
}

// maxKeyFile bounds what sign reads: a JWK is well under a kilobyte, and a
// wrong path (a device, a log) must not be read whole.
const maxKeyFile = 64 << 10

// readKeyFile reads a key file; its errors start with the path.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named below, without "open"
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("%s: over %d bytes, not a JWK", path, maxKeyFile)
	}
	return data, nil
}

// keyFile is one file keygen writes.
type keyFile struct {
	path string
	data []byte
	mode os.FileMode
}

// writeKeyFiles writes files, all or none as far as it can.
//
// Without force it refuses if any of them exists, before writing any, and
// creates each with O_EXCL, so that a file that appears meanwhile is not
// overwritten either; if one fails, those it created are removed.
//
// With force each is written to a temporary file beside it, with its mode
// set, and renamed over it. Writing in place would keep an existing file's
// mode: a private key could land in a world-readable file.
func writeKeyFiles(force bool, files ...keyFile) error {
	if !force {
		var exist []string
		for _, f := range files {
			if _, err := os.Lstat(f.path); err == nil {
				exist = append(exist, f.path)
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if len(exist) > 0 {
			verb := "exists"
			if len(exist) > 1 {
				verb = "exist"
			}
			return fmt.Errorf("%s already %s; add --force to replace (tokens signed with the key it holds stop verifying once its public key is gone)",
				strings.Join(exist, " and "), verb)
		}
		var created []string
		for _, f := range files {
			if err := createExclusive(f); err != nil {
				for _, p := range created {
					_ = os.Remove(p)
				}
				return err
			}
			created = append(created, f.path)
		}
		return nil
	}
	var temps []string
	defer func() {
		for _, t := range temps {
			_ = os.Remove(t) // gone already once renamed
		}
	}()
	for _, f := range files {
		t, err := writeTemp(f)
		if err != nil {
			return err
		}
		temps = append(temps, t)
	}
	for i, f := range files {
		if err := os.Rename(temps[i], f.path); err != nil {
			return err
		}
	}
	return nil
}

func createExclusive(f keyFile) (err error) {
	out, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.path)
		}
	}()
	return finishFile(out, f)
}

// writeTemp writes f to a new temporary file in f's directory and returns
// its path.
func writeTemp(f keyFile) (string, error) {
	out, err := os.CreateTemp(filepath.Dir(f.path), "."+filepath.Base(f.path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("%s: %w", f.path, err)
	}
	if err := finishFile(out, f); err != nil {
		_ = os.Remove(out.Name())
		return "", err
	}
	return out.Name(), nil
}

// finishFile sets out's mode exactly (the umask may have narrowed a public
// file's; it never widens a secret's), writes f's data, syncs and closes it.
func finishFile(out *os.File, f keyFile) error {
	err := out.Chmod(f.mode)
	if err == nil {
		_, err = out.Write(f.data)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	return nil
}
