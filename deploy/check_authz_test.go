package deploy

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// without removes the object named name of the given kind.
func (a *authzObjects) without(kind, name string) { a.objs = withoutObject(a.objs, kind, name) }

// TestAuthzContainerNamedFenceproxy: a container that runs `fenceproxy
// authz` is checked by CheckAuthz's rules, never by Check's sidecar rules,
// whatever its name, also the sidecar's.
func TestAuthzContainerNamedFenceproxy(t *testing.T) {
	docs := renderJSON(t, authzDir)

	t.Run("regular container", func(t *testing.T) {
		a := loadAuthz(t, docs)
		a.c.Name = SidecarName
		rep := Check(a.objs)
		if err := rep.Err(); err != nil || len(rep.Fenced) != 0 {
			t.Fatalf("Check took fenceproxy authz for a misplaced sidecar: %+v\n%v", rep.Fenced, err)
		}
		arep := CheckAuthz(a.objs)
		if err := arep.Err(); err != nil {
			t.Fatalf("CheckAuthz:\n%v", err)
		}
		if len(arep.Authz) != 1 || arep.Authz[0].Container != SidecarName {
			t.Errorf("want the container %s checked as fenceproxy authz, got %+v", SidecarName, arep.Authz)
		}
	})

	t.Run("init container", func(t *testing.T) {
		a := loadAuthz(t, docs)
		c := a.c.DeepCopy()
		c.Name, c.RestartPolicy = SidecarName, ptr.To(corev1.ContainerRestartPolicyAlways)
		pod := &a.dep.Spec.Template.Spec
		pod.InitContainers = append(pod.InitContainers, *c)
		rep := Check(a.objs)
		if len(rep.Fenced) != 0 {
			t.Errorf("Check ran the sidecar rules on fenceproxy authz: %+v", rep.Fenced)
		}
		if err := rep.Err(); err != nil {
			t.Errorf("Check:\n%v", err)
		}
		errs, _ := checkBoth(a.objs)
		checkFinding(t, "init container fenceproxy runs fenceproxy authz: the authorization mode is a service of its own", errLevel, errs, nil)
		for _, e := range errs {
			if msg := e.Error(); strings.Contains(msg, "config.Load ") || strings.Contains(msg, "FENCE_UPSTREAM_URL") || strings.Contains(msg, DataPortName) {
				t.Errorf("a sidecar rule ran on fenceproxy authz:\n%s", msg)
			}
		}
	})
}

// TestAuthzTokenKeys: CheckAuthz applies the sidecar's keys file checks
// (checkTokenKeys) to fenceproxy authz.
func TestAuthzTokenKeys(t *testing.T) {
	docs := renderJSON(t, authzDir)
	pub, priv := ed25519JWK(t, "k1")
	// withKeys gives the authz container a keys ConfigMap holding set,
	// mounted as the signed-tokens overlay mounts it in the sidecar.
	withKeys := func(a *authzObjects, set string) {
		cm := &corev1.ConfigMap{Data: map[string]string{"keys.json": set}}
		cm.Name, cm.Namespace = keysVolume, a.dep.Namespace
		a.objs = append(a.objs, Object{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Namespace: cm.Namespace, Name: cm.Name, Obj: cm})
		pod := &a.dep.Spec.Template.Spec
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: keysVolume,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: keysVolume}}}})
		a.c.VolumeMounts = append(a.c.VolumeMounts, corev1.VolumeMount{Name: keysVolume, MountPath: filepath.Dir(keysFile), ReadOnly: true})
		a.env.Data[TokenKeysVar] = keysFile
	}
	for _, tc := range []struct {
		name   string
		change func(a *authzObjects)
		want   string // "": passes
	}{
		{"a public key set", func(a *authzObjects) { withKeys(a, jwkSet(t, pub)) }, ""},
		{"not mounted", func(a *authzObjects) { a.env.Data[TokenKeysVar] = keysFile }, "but no volume is mounted there"},
		{"mounted with subPath", func(a *authzObjects) {
			withKeys(a, jwkSet(t, pub))
			m := &a.c.VolumeMounts[len(a.c.VolumeMounts)-1]
			m.MountPath, m.SubPath = keysFile, "keys.json"
		}, `mounts with subPath "keys.json"`},
		{"a private key", func(a *authzObjects) { withKeys(a, jwkSet(t, priv)) }, "holds private key material"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := loadAuthz(t, docs)
			tc.change(a)
			rep := CheckAuthz(a.objs)
			t.Log(errors.Join(rep.Errors...))
			if tc.want == "" {
				if err := rep.Err(); err != nil {
					t.Fatalf("want no error, got:\n%v", err)
				}
				if rep.Authz[0].Config.TokenKeysFile == "" {
					t.Errorf("config.LoadAuthz did not read %s", TokenKeysVar)
				}
				return
			}
			checkFinding(t, "Deployment/fenceproxy-authz/fenceproxy-authz: container authz: "+TokenKeysVar+" ", errLevel, rep.Errors, rep.Warnings)
			checkFinding(t, tc.want, errLevel, rep.Errors, rep.Warnings)
		})
	}
}
