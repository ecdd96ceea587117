package deploy

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/fenceproxy/fenceproxy/config"
	corev1 "k8s.io/api/core/v1"
)

// TokenKeysVar is the variable that names the sidecar's keys file: the JWK
// Set it verifies signed fencing tokens with (docs/tokens.md).
const TokenKeysVar = "FENCE_TOKEN_KEYS_FILE"

// checkTokenKeys checks the keys file of the fenceproxy container c (the
// sidecar, or fenceproxy authz) when its environment sets TokenKeysVar. The file must be reachable through a volume mount of c
// (a ConfigMap or a Secret), mounted without subPath, so that the kubelet's
// updates reach it and fenceproxy reloads rotated keys; it must hold no
// private key material, and no HS256 secret when it comes from a
// ConfigMap; and it must parse with fenceproxy's own parser
// (config.CheckKeySet), or the sidecar would not start.
//
// Every problem names the variable and the file; p already names the
// workload and the container.
func checkTokenKeys(p problems, idx *index, w workload, c *corev1.Container, env map[string]string) {
	file := env[TokenKeysVar]
	if file == "" {
		return
	}
	if !path.IsAbs(file) {
		p.add("%s is %q, a relative path: the file is then looked up in the container's working directory, where no volume is mounted. Name it by the absolute path inside the volume mount of the keys.",
			TokenKeysVar, file)
		return
	}
	mount := mountOf(c, file)
	if mount == nil {
		p.add("%s names %s, but no volume is mounted there, so fenceproxy would not start. Mount the ConfigMap or Secret that holds the JWK Set on the file's directory.",
			TokenKeysVar, file)
		return
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		sub := mount.SubPath
		if sub == "" {
			sub = mount.SubPathExpr
		}
		p.add("%s names %s, which volume %s mounts with subPath %q. A subPath mount never sees an update of its ConfigMap or Secret, so rotated keys would never reach fenceproxy (and a removed key would stay trusted). Mount the volume on the file's directory, without subPath.",
			TokenKeysVar, file, mount.Name, sub)
	}
	data, err := mountedFile(idx, w, c, file)
	if err != nil {
		p.add("%s names %s, which the container cannot read (%v), so fenceproxy would not start. Mount the ConfigMap or Secret that holds the JWK Set there.",
			TokenKeysVar, file, err)
		return
	}
	source := volumeSource(w, mount.Name)

	private, shared := secretMembers(data)
	if len(private) > 0 {
		leak := "whoever can read the Secret can mint fencing tokens"
		if strings.HasPrefix(source, "ConfigMap") {
			leak = "a ConfigMap is readable by anyone who may read the namespace's configuration, so treat the key as leaked: make a new one"
		}
		p.add("%s names %s, from %s, which holds private key material (%s): %s. fenceproxy refuses a private key in its keys file; publish the public JWK Set (the --public file of `fenceproxy token keygen`) and keep the private key with the lease service.",
			TokenKeysVar, file, source, strings.Join(private, ", "), leak)
		return // the parse below would refuse the same keys again
	}
	if err := config.CheckKeySet(data); err != nil {
		p.add("%s names %s, from %s, which is not a JWK Set fenceproxy accepts, so fenceproxy would not start: %s",
			TokenKeysVar, file, source, oneLine(err))
		return
	}
	if len(shared) > 0 && strings.HasPrefix(source, "ConfigMap") {
		p.add("%s names %s, from %s, which holds an HS256 shared secret (%s): whoever can read the ConfigMap can mint any fencing token. Give an HS256 key set to fenceproxy from a Secret, or use EdDSA or ES256 keys, whose set is public.",
			TokenKeysVar, file, source, strings.Join(shared, ", "))
	}
}

// mountOf returns the volume mount of c that file is in: the one with the
// longest mount path that contains it, as mountedFile resolves it.
func mountOf(c *corev1.Container, file string) *corev1.VolumeMount {
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (file == m.MountPath || strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")) &&
			(mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	return mount
}

// volumeSource names what the pod's volume name holds: ConfigMap "x" or
// Secret "x".
func volumeSource(w workload, name string) string {
	for _, v := range w.spec.Volumes {
		switch {
		case v.Name != name:
		case v.ConfigMap != nil:
			return fmt.Sprintf("ConfigMap %q", v.ConfigMap.Name)
		case v.Secret != nil:
			return fmt.Sprintf("Secret %q", v.Secret.SecretName)
		}
	}
	return fmt.Sprintf("volume %q", name)
}

// secretMembers lists the keys of a JWK Set that carry private key
// material (the "d" of an EC, OKP or RSA key, or RSA's other private
// members), each as `key N (kid "x") has "d"`, and those that are shared
// secrets (an "oct" key, whose "k" signs as well as verifies), each as
// `key N (kid "x")`. Member names are compared without regard to case, as a
// lenient JSON decoder would match them. A file that is not a JWK Set
// yields nothing: config.CheckKeySet reports it.
func secretMembers(data []byte) (private, shared []string) {
	var set struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if json.Unmarshal(data, &set) != nil {
		return nil, nil
	}
	for i, k := range set.Keys {
		member := func(names ...string) (string, json.RawMessage) {
			for name, v := range k {
				if slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, name) }) && string(v) != "null" {
					return name, v
				}
			}
			return "", nil
		}
		var kid, kty string
		if _, v := member("kid"); v != nil {
			_ = json.Unmarshal(v, &kid)
		}
		if _, v := member("kty"); v != nil {
			_ = json.Unmarshal(v, &kty)
		}
		what := fmt.Sprintf("key %d", i)
		if kid != "" {
			what += fmt.Sprintf(" (kid %q)", kid)
		}
		if name, _ := member("d", "p", "q", "dp", "dq", "qi", "oth"); name != "" {
			private = append(private, fmt.Sprintf("%s has %q", what, name))
		} else if name, _ := member("k"); name != "" || strings.EqualFold(kty, "oct") {
			shared = append(shared, what)
		}
	}
	return private, shared
}
