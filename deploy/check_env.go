package deploy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/proxy"
	corev1 "k8s.io/api/core/v1"
)

// resolveEnv builds the sidecar's environment as the kubelet would: envFrom
// in order, then env, later entries winning. FENCE_* values it cannot resolve
// from the objects are problems.
func resolveEnv(p problems, idx *index, w workload, c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, src := range c.EnvFrom {
		switch {
		case src.ConfigMapRef != nil:
			cm := idx.configMaps[key(w.ns, src.ConfigMapRef.Name)]
			if cm == nil {
				if src.ConfigMapRef.Optional == nil || !*src.ConfigMapRef.Optional {
					p.add("envFrom ConfigMap %q is not among the objects.", src.ConfigMapRef.Name)
				}
				continue
			}
			for k, v := range cm.Data {
				env[src.Prefix+k] = v
			}
		case src.SecretRef != nil:
			s := idx.secrets[key(w.ns, src.SecretRef.Name)]
			if s == nil {
				p.add("envFrom Secret %q is not among the objects: its FENCE_* values cannot be checked.", src.SecretRef.Name)
				continue
			}
			for k, v := range secretData(s) {
				env[src.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		if strings.Contains(e.Value, "$(") {
			p.warn("env %s: $(VAR) references are not checked; spell the value out.", e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if cm := idx.configMaps[key(w.ns, ref.Name)]; cm != nil {
				if v, ok := cm.Data[ref.Key]; ok {
					env[e.Name] = v
					continue
				}
			}
			p.add("env %s: ConfigMap %s key %s is not among the objects.", e.Name, ref.Name, ref.Key)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s := idx.secrets[key(w.ns, ref.Name)]; s != nil {
				if v, ok := secretData(s)[ref.Key]; ok {
					env[e.Name] = v
					continue
				}
			}
			if strings.HasPrefix(e.Name, "FENCE_") {
				p.add("env %s: Secret %s key %s is not among the objects: the value cannot be checked.", e.Name, ref.Name, ref.Key)
			}
		default:
			if strings.HasPrefix(e.Name, "FENCE_") {
				p.warn("env %s: only values, ConfigMap and Secret keys can be checked, not valueFrom.fieldRef or resourceFieldRef.", e.Name)
			}
		}
	}
	return env
}

func secretData(s *corev1.Secret) map[string]string {
	m := map[string]string{}
	for k, v := range s.Data {
		m[k] = string(v)
	}
	for k, v := range s.StringData {
		m[k] = v
	}
	return m
}

// loadConfig runs fenceproxy's own loader, load, and route check on env:
// config.Load for the sidecar, config.LoadAuthz for fenceproxy authz. The
// files the environment names (FENCE_*_FILE) are read from the ConfigMap or
// Secret mounted at that path and handed to load as temporary files.
func loadConfig(p problems, idx *index, w workload, c *corev1.Container, env map[string]string,
	load func(map[string]string) (*config.Config, error)) (*config.Config, error) {
	dir, err := os.MkdirTemp("", "fenceproxy-deploy-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	env = maps.Clone(env)
	// Never the files of the machine running the check: a file that is not
	// mounted from the objects is one that does not exist.
	var renames []string
	for k, v := range env {
		if !strings.HasPrefix(k, "FENCE_") || !strings.HasSuffix(k, "_FILE") || v == "" {
			continue
		}
		tmp := filepath.Join(dir, strings.ToLower(k))
		renames = append(renames, tmp, v)
		env[k] = tmp
		data, err := mountedFile(idx, w, c, v)
		if err != nil {
			if k != TokenKeysVar { // checkTokenKeys reports it
				p.add("%s names %s, which the container cannot read (%v), so fenceproxy would not start.", k, v, err)
			}
			continue
		}
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return nil, err
		}
	}
	// Messages name the paths in the pod, not the temporary files.
	pod := strings.NewReplacer(renames...)
	cfg, err := load(env)
	if err != nil {
		return nil, errors.New(pod.Replace(err.Error()))
	}
	if err := proxy.CheckRoutes(cfg.Routes); err != nil {
		return nil, errors.New(pod.Replace(err.Error()))
	}
	return cfg, nil
}

// mountedFile returns the content the container sees at file, from the
// ConfigMap or Secret volume mounted over it.
func mountedFile(idx *index, w workload, c *corev1.Container, file string) ([]byte, error) {
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (file == m.MountPath || strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")) &&
			(mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return nil, errors.New("no volume is mounted there")
	}
	var vol *corev1.Volume
	for i := range w.spec.Volumes {
		if w.spec.Volumes[i].Name == mount.Name {
			vol = &w.spec.Volumes[i]
		}
	}
	if vol == nil {
		return nil, fmt.Errorf("volume %q is not in the pod", mount.Name)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(file, mount.MountPath), "/")
	if mount.SubPath != "" {
		rel = path.Join(mount.SubPath, rel)
	}
	var items []corev1.KeyToPath
	var data map[string]string
	switch {
	case vol.ConfigMap != nil:
		cm := idx.configMaps[key(w.ns, vol.ConfigMap.Name)]
		if cm == nil {
			return nil, fmt.Errorf("ConfigMap %q is not among the objects", vol.ConfigMap.Name)
		}
		items, data = vol.ConfigMap.Items, cm.Data
	case vol.Secret != nil:
		s := idx.secrets[key(w.ns, vol.Secret.SecretName)]
		if s == nil {
			return nil, fmt.Errorf("Secret %q is not among the objects", vol.Secret.SecretName)
		}
		items, data = vol.Secret.Items, secretData(s)
	default:
		return nil, fmt.Errorf("volume %q is neither a ConfigMap nor a Secret", vol.Name)
	}
	k := rel
	if len(items) > 0 {
		k = ""
		for _, it := range items {
			if it.Path == rel {
				k = it.Key
			}
		}
	}
	v, ok := data[k]
	if !ok || k == "" {
		return nil, fmt.Errorf("volume %q has no file %q", vol.Name, rel)
	}
	return []byte(v), nil
}

// checkListen compares a listen address of the configuration with the
// container port it is published as.
func checkListen(p problems, variable, addr string, containerPort int32, portName string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("%s %q is not a host:port (%v).", variable, addr, err)
		return
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		p.add("%s %q must listen on every interface: the kubelet and the Service reach the pod IP.", variable, addr)
	}
	if containerPort != 0 && port != strconv.Itoa(int(containerPort)) { // 0: namedPort reported the missing port
		p.add("%s %q does not match the container port %s (%d).", variable, addr, portName, containerPort)
	}
}

// checkUpstream requires the upstream on the pod's loopback and returns its
// port.
func checkUpstream(p problems, cfg *config.Config, c *corev1.Container) int32 {
	u := cfg.UpstreamURL
	if !isLoopback(u.Hostname()) {
		p.add("FENCE_UPSTREAM_URL %q must be the app on the pod's loopback (127.0.0.1): anything else is reachable without the sidecar.", u.Redacted())
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, _ := strconv.Atoi(port)
	for _, cp := range c.Ports {
		if cp.ContainerPort == int32(n) {
			p.add("FENCE_UPSTREAM_URL port %d is the sidecar's own port %s.", n, containerPortName(cp))
		}
	}
	return int32(n)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
