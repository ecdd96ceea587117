package deploy

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var signedDir = filepath.Join("examples", "signed-tokens")

// signedSample is the signed-tokens overlay: the sample app plus the keys
// ConfigMap, its volume and its mount in the sidecar.
type signedSample struct {
	*sample
	keys *corev1.ConfigMap
}

const (
	keysVolume = "fenceproxy-token-keys"
	keysFile   = "/etc/fenceproxy-keys/keys.json"
	// The prefix every problem of the sidecar carries.
	sidecarPrefix = "Deployment/fenceproxy-sample/sample-app: container fenceproxy: "
)

func loadSigned(t *testing.T, docs [][]byte) *signedSample {
	t.Helper()
	s := &signedSample{sample: loadSample(t, docs)}
	s.keys = get[*corev1.ConfigMap](t, s.objs, keysVolume)
	if s.mount() == nil || s.volume() == nil || s.env.Data[TokenKeysVar] != keysFile {
		t.Fatal("the signed-tokens overlay changed shape: update loadSigned")
	}
	return s
}

func (s *signedSample) mount() *corev1.VolumeMount {
	for i, m := range s.sidecar.VolumeMounts {
		if m.Name == keysVolume {
			return &s.sidecar.VolumeMounts[i]
		}
	}
	return nil
}

func (s *signedSample) volume() *corev1.Volume {
	vs := s.app.Spec.Template.Spec.Volumes
	for i := range vs {
		if vs[i].Name == keysVolume {
			return &vs[i]
		}
	}
	return nil
}

// toSecret moves the keys from the ConfigMap into a Secret of the same
// name, mounted the same way, with keys.json set to set.
func (s *signedSample) toSecret(set string) {
	s.without("ConfigMap", keysVolume)
	sec := &corev1.Secret{Data: map[string][]byte{"keys.json": []byte(set)}}
	sec.Name, sec.Namespace = keysVolume, s.app.Namespace
	s.objs = append(s.objs, Object{GVK: corev1.SchemeGroupVersion.WithKind("Secret"), Namespace: sec.Namespace, Name: sec.Name, Obj: sec})
	v := s.volume()
	v.ConfigMap = nil
	v.Secret = &corev1.SecretVolumeSource{SecretName: keysVolume}
}

// Keys made for the test (no key material is stored in the repository but
// the overlay's public key).
func jwkSet(t *testing.T, keys ...map[string]string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ed25519JWK returns a public Ed25519 JWK with kid, and the same key with
// its private part "d".
func ed25519JWK(t *testing.T, kid string) (public, private map[string]string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	public = map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": kid, "x": enc(pub)}
	private = map[string]string{"d": enc(priv.Seed())}
	for k, v := range public {
		private[k] = v
	}
	return public, private
}

func hs256JWK(t *testing.T, kid string) map[string]string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"kty": "oct", "alg": "HS256", "kid": kid, "k": base64.RawURLEncoding.EncodeToString(k)}
}

// tokenProblems are the findings that name the keys variable: the errors,
// then the warnings.
func tokenProblems(rep Report) (errs, warns []string) {
	for _, e := range rep.Errors {
		if strings.Contains(e.Error(), TokenKeysVar) {
			errs = append(errs, e.Error())
		}
	}
	for _, e := range rep.Warnings {
		if strings.Contains(e.Error(), TokenKeysVar) {
			warns = append(warns, e.Error())
		}
	}
	return errs, warns
}

// TestSignedTokensOverlay: the overlay passes every check, and gives the
// sidecar its keys as in-place rotation needs them: a ConfigMap with a
// fixed name, its directory mounted read-only, the variable pointing into it.
func TestSignedTokensOverlay(t *testing.T) {
	s := loadSigned(t, renderJSON(t, signedDir))
	rep := Check(s.objs)
	if err := rep.Err(); err != nil {
		t.Fatalf("checks:\n%v", err)
	}
	if len(rep.Fenced) != 1 || rep.Fenced[0].Config == nil || rep.Fenced[0].Config.TokenKeysFile == "" {
		t.Fatalf("want one fenced workload with %s set, got %+v", TokenKeysVar, rep.Fenced)
	}
	if s.keys.Name != keysVolume {
		t.Errorf("the keys ConfigMap is named %s: a hash suffix would roll the pods on every key change instead of updating the file in place", s.keys.Name)
	}
	m := s.mount()
	if !m.ReadOnly || m.SubPath != "" || m.MountPath != filepath.Dir(keysFile) {
		t.Errorf("the keys mount is %+v, want the directory %s read-only without subPath", *m, filepath.Dir(keysFile))
	}
	if v := s.volume(); v.ConfigMap == nil || v.ConfigMap.Name != keysVolume {
		t.Errorf("the keys volume is %+v, want the ConfigMap %s", *v, keysVolume)
	}
}

// tokenKeyCase changes the signed-tokens overlay's keys one way.
type tokenKeyCase struct {
	name   string
	change func(s *signedSample)
	file   string   // the file the problem names; keysFile if empty
	want   []string // substrings of the one problem, an error; none: the change passes
}

// tokenKeyCases are the cases of TestTokenKeysChecks, also run by
// TestFindingMessages.
func tokenKeyCases(t *testing.T) []tokenKeyCase {
	pub1, priv1 := ed25519JWK(t, "k1")
	pub2, _ := ed25519JWK(t, "k2")
	setFile := func(s *signedSample, set string) { s.keys.Data["keys.json"] = set }
	return []tokenKeyCase{
		// Good manifests.
		{name: "the overlay as rendered", change: func(*signedSample) {}},
		{name: "two keys, as during a rotation", change: func(s *signedSample) { setFile(s, jwkSet(t, pub1, pub2)) }},
		{name: "from a Secret", change: func(s *signedSample) { s.toSecret(jwkSet(t, pub1)) }},
		{name: "an HS256 key from a Secret", change: func(s *signedSample) { s.toSecret(jwkSet(t, hs256JWK(t, "h1"))) }},
		{name: "the file renamed through items", change: func(s *signedSample) {
			s.volume().ConfigMap.Items = []corev1.KeyToPath{{Key: "keys.json", Path: "jwks.json"}}
			s.env.Data[TokenKeysVar] = "/etc/fenceproxy-keys/jwks.json"
		}},

		// Where the file comes from.
		{name: "mounted with subPath", change: func(s *signedSample) {
			m := s.mount()
			m.MountPath, m.SubPath = keysFile, "keys.json"
		}, want: []string{`mounts with subPath "keys.json"`, "rotated keys would never reach fenceproxy", "without subPath"}},
		{name: "the directory mounted with subPath", change: func(s *signedSample) {
			s.volume().ConfigMap.Items = []corev1.KeyToPath{{Key: "keys.json", Path: "keys/keys.json"}}
			s.mount().SubPath = "keys"
		}, want: []string{`mounts with subPath "keys"`}},
		{name: "not mounted", change: func(s *signedSample) {
			s.sidecar.VolumeMounts = slices.DeleteFunc(s.sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == keysVolume })
		}, want: []string{"but no volume is mounted there", "fenceproxy would not start"}},
		{name: "the variable names another directory", change: func(s *signedSample) { s.env.Data[TokenKeysVar] = "/etc/keys/keys.json" },
			file: "/etc/keys/keys.json", want: []string{"but no volume is mounted there"}},
		{name: "a relative path", change: func(s *signedSample) { s.env.Data[TokenKeysVar] = "keys.json" },
			file: `"keys.json"`, want: []string{"a relative path"}},
		{name: "no such file in the ConfigMap", change: func(s *signedSample) { s.env.Data[TokenKeysVar] = "/etc/fenceproxy-keys/jwks.json" },
			file: "/etc/fenceproxy-keys/jwks.json", want: []string{"cannot read", `has no file "jwks.json"`}},
		{name: "the ConfigMap is missing", change: func(s *signedSample) { s.without("ConfigMap", keysVolume) },
			want: []string{"cannot read", `ConfigMap "fenceproxy-token-keys" is not among the objects`}},
		{name: "the volume is missing", change: func(s *signedSample) {
			s.app.Spec.Template.Spec.Volumes = slices.DeleteFunc(s.app.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == keysVolume })
		}, want: []string{`volume "fenceproxy-token-keys" is not in the pod`}},
		{name: "an emptyDir", change: func(s *signedSample) {
			v := s.volume()
			v.ConfigMap, v.EmptyDir = nil, &corev1.EmptyDirVolumeSource{}
		}, want: []string{"neither a ConfigMap nor a Secret"}},

		// What the file holds.
		{name: "a private key in the ConfigMap", change: func(s *signedSample) { setFile(s, jwkSet(t, pub2, priv1)) },
			want: []string{`from ConfigMap "fenceproxy-token-keys"`, `private key material (key 1 (kid "k1") has "d")`, "treat the key as leaked", "keep the private key with the lease service"}},
		{name: "a private key in a Secret", change: func(s *signedSample) { s.toSecret(jwkSet(t, priv1)) },
			want: []string{`from Secret "fenceproxy-token-keys"`, `private key material (key 0 (kid "k1") has "d")`}},
		{name: "a private member in another case", change: func(s *signedSample) {
			p := map[string]string{"D": priv1["d"]}
			for k, v := range pub1 {
				p[k] = v
			}
			setFile(s, jwkSet(t, p))
		}, want: []string{`private key material (key 0 (kid "k1") has "D")`}},
		{name: "an HS256 secret in the ConfigMap", change: func(s *signedSample) { setFile(s, jwkSet(t, pub1, hs256JWK(t, "h1"))) },
			want: []string{`HS256 shared secret (key 1 (kid "h1"))`, "from a Secret"}},
		{name: "not JSON", change: func(s *signedSample) { setFile(s, `{"keys": [`) },
			want: []string{"is not a JWK Set fenceproxy accepts", "fenceproxy would not start", "not a JWK Set"}},
		{name: "a single JWK, not a set", change: func(s *signedSample) {
			b, _ := json.Marshal(pub1)
			setFile(s, string(b))
		}, want: []string{`no "keys" array`}},
		{name: "an empty set", change: func(s *signedSample) { setFile(s, `{"keys": []}`) },
			want: []string{"has no keys"}},
		{name: "a key without kid", change: func(s *signedSample) {
			delete(pub2, "kid")
			setFile(s, jwkSet(t, pub1, pub2))
		}, want: []string{`key 1: no "kid"`}},
		{name: "a kid twice", change: func(s *signedSample) { setFile(s, jwkSet(t, pub1, pub1)) },
			want: []string{`kid "k1" appears twice`}},
	}
}

// TestTokenKeysChecks breaks the overlay's keys one way at a time: Check
// must report each, once, as an error, in one sentence that names the
// workload, the container, the variable and the file. The good variants
// must pass.
func TestTokenKeysChecks(t *testing.T) {
	docs := renderJSON(t, signedDir)
	for _, tc := range tokenKeyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSigned(t, docs)
			tc.change(s)
			rep := Check(s.objs)
			errs, warns := tokenProblems(rep)
			got := append(errs, warns...)
			if len(tc.want) == 0 {
				if err := rep.Err(); err != nil {
					t.Fatalf("want no problem, got:\n%v", err)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one problem naming %s, got %d:\n%s", TokenKeysVar, len(got), strings.Join(got, "\n"))
			}
			if len(errs) != 1 {
				t.Errorf("want the problem to be an error (a keys file the sidecar cannot use, or that leaks a key), got a warning:\n%s", got[0])
			}
			msg := got[0]
			t.Log(msg)
			file := tc.file
			if file == "" {
				file = keysFile
			}
			if !strings.HasPrefix(msg, sidecarPrefix+TokenKeysVar+" ") || !strings.Contains(msg, file) || !strings.HasSuffix(msg, ".") {
				t.Errorf("want one sentence starting %q and naming %s, got:\n%s", sidecarPrefix+TokenKeysVar, file, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("want the problem to contain %q, got:\n%s", w, msg)
				}
			}
		})
	}
}
