package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// runToken runs `fenceproxy token args...` in-process.
func runToken(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), append([]string{"token"}, args...), nil, &out, &errOut)
	return out.String(), errOut.String(), err
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// For each kind: keygen writes the two files with their modes, sign mints a
// token from the private one, and the token verifies against the public set
// with the claims asked for.
func TestTokenKeygenSignVerify(t *testing.T) {
	tests := []struct {
		kind, flag string // the kind made, and how --kind spells it ("" = the default)
		setMode    os.FileMode
		warns      bool // says on stderr that the set is secret
	}{
		{kind: "EdDSA", setMode: 0o644},
		{kind: "ES256", flag: "ES256", setMode: 0o644},
		{kind: "HS256", flag: "HS256", setMode: 0o600, warns: true},
		{kind: "HS256", flag: "hs256", setMode: 0o600, warns: true},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.flag, func(t *testing.T) {
			dir := t.TempDir()
			priv, pub := filepath.Join(dir, "signing.jwk"), filepath.Join(dir, "keys.json")
			args := []string{"keygen", "--kid", "k1", "--private", priv, "--public", pub}
			if tt.flag != "" {
				args = append([]string{"keygen", "--kind", tt.flag}, args[1:]...)
			}
			out, errOut, err := runToken(args...)
			if err != nil {
				t.Fatalf("keygen: %v", err)
			}
			if !strings.Contains(out, tt.kind+" private key (kid k1)") {
				t.Fatalf("keygen printed %q", out)
			}
			if got := strings.Contains(errOut, "shared secret"); got != tt.warns {
				t.Fatalf("stderr %q: warns %v, want %v", errOut, got, tt.warns)
			}
			if m := fileMode(t, priv); m != 0o600 {
				t.Fatalf("private key mode %04o, want 0600", m)
			}
			if m := fileMode(t, pub); m != tt.setMode {
				t.Fatalf("JWK Set mode %04o, want %04o", m, tt.setMode)
			}
			set, err := os.ReadFile(pub)
			if err != nil {
				t.Fatal(err)
			}
			keys, err := fencejwt.ParseKeySet(set)
			if err != nil {
				t.Fatalf("the public file is not a keys file: %v", err)
			}

			before := time.Now()
			out, _, err = runToken("sign", "--key", priv, "--fence", "18446744073709551615", "--res", "orders/*", "--ttl", "2m", "--nbf-now")
			after := time.Now()
			if err != nil {
				t.Fatalf("sign: %v", err)
			}
			tok := strings.TrimSuffix(out, "\n")
			if strings.Count(out, "\n") != 1 || strings.Count(tok, ".") != 2 {
				t.Fatalf("sign printed %q, want one compact JWS line", out)
			}
			c, err := fencejwt.Verify(tok, keys, time.Now(), 0)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Fence != 18446744073709551615 || c.Resource != "orders/*" || !c.Covers("orders/42") || c.Covers("users/1") {
				t.Fatalf("claims %+v", c)
			}
			// exp is rounded up to a second, nbf down.
			if c.Expiry.Before(before.Add(2*time.Minute)) || c.Expiry.After(after.Add(2*time.Minute+time.Second)) {
				t.Fatalf("exp %v, want 2m after %v", c.Expiry, before)
			}
			if c.NotBefore.IsZero() || c.NotBefore.After(after) || c.NotBefore.Before(before.Add(-time.Second)) {
				t.Fatalf("nbf %v, want about %v", c.NotBefore, before)
			}

			// -o json: the token and what it says, numbers as decimal strings.
			out, _, err = runToken("sign", "-o", "json", "--key", priv, "--fence", "7")
			if err != nil {
				t.Fatalf("sign -o json: %v", err)
			}
			var j map[string]string
			if err := json.Unmarshal([]byte(out), &j); err != nil {
				t.Fatalf("sign -o json printed %q: %v", out, err)
			}
			c, err = fencejwt.Verify(j["token"], keys, time.Now(), 0)
			if err != nil || c.Fence != 7 || c.Resource != "" || j["fence"] != "7" || j["kid"] != "k1" {
				t.Fatalf("sign -o json: %v, claims %+v, output %v", err, c, j)
			}
			if exp, err := time.Parse(time.RFC3339, j["exp"]); err != nil || !exp.Equal(c.Expiry) {
				t.Fatalf("sign -o json: exp %q, the token's %v", j["exp"], c.Expiry)
			}
		})
	}
}

// Without --force keygen touches no existing file, not even the other one;
// with --force it replaces both and sets their modes, whatever they were.
func TestTokenKeygenOverwrite(t *testing.T) {
	tests := []struct {
		name     string
		existing []string // of "priv", "pub"
	}{
		{"private exists", []string{"priv"}},
		{"public exists", []string{"pub"}},
		{"both exist", []string{"priv", "pub"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			paths := map[string]string{"priv": filepath.Join(dir, "signing.jwk"), "pub": filepath.Join(dir, "keys.json")}
			for _, e := range tt.existing {
				// Wide open, as a careless earlier file could be.
				if err := os.WriteFile(paths[e], []byte("old"), 0o666); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(paths[e], 0o666); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := runToken("keygen", "--private", paths["priv"], "--public", paths["pub"])
			if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "--force") {
				t.Fatalf("keygen over existing files: %v", err)
			}
			for _, e := range tt.existing {
				if !strings.Contains(err.Error(), paths[e]) {
					t.Fatalf("the error does not name %s: %v", paths[e], err)
				}
			}
			for name, p := range paths {
				data, err := os.ReadFile(p)
				switch existed := strings.Contains(strings.Join(tt.existing, " "), name); {
				case existed && string(data) != "old":
					t.Fatalf("%s was changed: %q, %v", p, data, err)
				case !existed && !os.IsNotExist(err):
					t.Fatalf("%s was created by a refused keygen: %v", p, err)
				}
			}

			if _, _, err := runToken("keygen", "--force", "--private", paths["priv"], "--public", paths["pub"]); err != nil {
				t.Fatalf("keygen --force: %v", err)
			}
			if m := fileMode(t, paths["priv"]); m != 0o600 {
				t.Fatalf("private key mode %04o after --force, want 0600", m)
			}
			if m := fileMode(t, paths["pub"]); m != 0o644 {
				t.Fatalf("JWK Set mode %04o after --force, want 0644", m)
			}
			priv, _ := os.ReadFile(paths["priv"])
			if _, err := fencejwt.ParseSigningKey(priv); err != nil {
				t.Fatalf("the replaced private key: %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) > 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

// Usage errors exit 2 and say what is wrong; a key file that cannot be used
// exits 1 and names it; -h prints the usage and exits 0.
func TestTokenBadFlags(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "signing.jwk"), filepath.Join(dir, "keys.json")
	if _, _, err := runToken("keygen", "--private", priv, "--public", pub); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := func(name string) string { return filepath.Join(dir, name) }

	tests := []struct {
		name string
		args []string
		code int
		want string // in the error
	}{
		{"no subcommand", nil, 2, "usage: fenceproxy token keygen"},
		{"unknown subcommand", []string{"mint"}, 2, `unknown token command "mint"`},
		{"unknown flag", []string{"keygen", "--bogus"}, 2, "-bogus"},
		{"keygen without --private", []string{"keygen", "--public", fresh("p1")}, 2, "--private FILE is required"},
		{"keygen without --public", []string{"keygen", "--private", fresh("k1")}, 2, "--public FILE is required"},
		{"keygen unknown kind", []string{"keygen", "--kind", "RS256", "--private", fresh("k2"), "--public", fresh("p2")}, 2, `--kind "RS256"`},
		{"keygen empty kid", []string{"keygen", "--kid", "", "--private", fresh("k3"), "--public", fresh("p3")}, 2, `--kid ""`},
		{"keygen kid with a space", []string{"keygen", "--kid", "a b", "--private", fresh("k4"), "--public", fresh("p4")}, 2, "without spaces"},
		{"keygen one file for both", []string{"keygen", "--private", fresh("k5"), "--public", fresh("k5")}, 2, "same file"},
		{"keygen argument", []string{"keygen", "--private", fresh("k6"), "--public", fresh("p6"), "extra"}, 2, `unexpected argument "extra"`},
		{"keygen bad -o", []string{"keygen", "-o", "yaml", "--private", fresh("k7"), "--public", fresh("p7")}, 2, "-o must be text or json"},
		{"keygen into a missing directory", []string{"keygen", "--private", fresh("no/k"), "--public", fresh("p8")}, 1, fresh("no/k")},
		{"sign without --key", []string{"sign", "--fence", "1"}, 2, "--key FILE is required"},
		{"sign without --fence", []string{"sign", "--key", priv}, 2, "--fence N is required"},
		{"sign leading zero", []string{"sign", "--key", priv, "--fence", "042"}, 2, `--fence "042" is not a canonical decimal`},
		{"sign plus sign", []string{"sign", "--key", priv, "--fence", "+1"}, 2, "not a canonical decimal"},
		{"sign negative", []string{"sign", "--key", priv, "--fence", "-1"}, 2, "not a canonical decimal"},
		{"sign over uint64", []string{"sign", "--key", priv, "--fence", "18446744073709551616"}, 2, "not a canonical decimal"},
		{"sign zero ttl", []string{"sign", "--key", priv, "--fence", "1", "--ttl", "0s"}, 2, "--ttl 0s: must be positive"},
		{"sign negative ttl", []string{"sign", "--key", priv, "--fence", "1", "--ttl", "-1m"}, 2, "must be positive"},
		{"sign bad ttl", []string{"sign", "--key", priv, "--fence", "1", "--ttl", "soon"}, 2, "-ttl"},
		{"sign empty res", []string{"sign", "--key", priv, "--fence", "1", "--res", ""}, 2, `--res "": empty`},
		{"sign star inside res", []string{"sign", "--key", priv, "--fence", "1", "--res", "orders/*/lines"}, 2, "only at the end"},
		{"sign argument before flags", []string{"sign", "orders/1", "--key", priv, "--fence", "1"}, 2, `unexpected argument "orders/1"`},
		{"sign missing key file", []string{"sign", "--key", fresh("absent.jwk"), "--fence", "1"}, 1, "--key " + fresh("absent.jwk") + ": no such file"},
		{"sign with the public set", []string{"sign", "--key", pub, "--fence", "1"}, 1, "is a JWK Set"},
		{"sign with garbage", []string{"sign", "--key", garbage, "--fence", "1"}, 1, "--key " + garbage + ": not a JWK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runToken(tt.args...)
			if err == nil {
				t.Fatalf("no error; printed %q", out)
			}
			if exitCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("exit %d, %v; want exit %d with %q", exitCode(err), err, tt.code, tt.want)
			}
			if out != "" {
				t.Fatalf("printed %q on stdout with an error", out)
			}
		})
	}

	for _, args := range [][]string{{"-h"}, {"help"}, {"keygen", "-h"}, {"sign", "--help"}} {
		out, _, err := runToken(args...)
		if err != nil || !strings.Contains(out, "usage: fenceproxy token") {
			t.Fatalf("%v: %v, printed %q", args, err, out)
		}
	}
	out, _, _ := runToken("sign", "-h")
	for _, f := range []string{"-key", "-fence", "-res", "-ttl", "-nbf-now"} {
		if !strings.Contains(out, f) {
			t.Fatalf("sign -h does not list %s:\n%s", f, out)
		}
	}
	var help bytes.Buffer
	if err := run(context.Background(), []string{"help"}, nil, &help, &help); err != nil || !strings.Contains(help.String(), "token     keygen") {
		t.Fatalf("fenceproxy help: %v\n%s", err, help.String())
	}
}

// The default kid is the date and a random suffix: two keys made the same
// day differ.
func TestTokenDefaultKID(t *testing.T) {
	dir := t.TempDir()
	kids := map[string]bool{}
	for i := range 2 {
		priv, pub := filepath.Join(dir, "k"+string(rune('a'+i))), filepath.Join(dir, "p"+string(rune('a'+i)))
		out, _, err := runToken("keygen", "-o", "json", "--private", priv, "--public", pub)
		if err != nil {
			t.Fatal(err)
		}
		var j map[string]string
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatalf("keygen -o json printed %q", out)
		}
		if !regexp.MustCompile(`^[0-9]{8}-[0-9a-f]{8}$`).MatchString(j["kid"]) {
			t.Fatalf("default kid %q, want YYYYMMDD-xxxxxxxx", j["kid"])
		}
		kids[j["kid"]] = true
	}
	if len(kids) != 2 {
		t.Fatalf("two keys got one kid: %v", kids)
	}
}
