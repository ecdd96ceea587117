package deploy

import (
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// checkStore checks that the sidecar's store keeps marks for all its pods.
// It returns the Redis StatefulSet FENCE_REDIS_URL reaches among the objects.
func checkStore(p problems, idx *index, w workload, c *corev1.Container, cfg *config.Config) string {
	switch cfg.Store {
	case config.StoreMemory:
		p.add("FENCE_STORE=memory forgets every mark on restart.")
	case config.StoreBolt:
		if w.replicas > 1 {
			p.add("the bolt store keeps marks per pod: %d replicas need Redis (FENCE_REDIS_URL).", w.replicas)
		}
		if !onPersistentVolume(w, c, cfg.BoltPath) {
			p.add("FENCE_BOLT_PATH %q must be on a writable persistent volume (the root filesystem is read-only; an emptyDir dies with the pod).", cfg.BoltPath)
		}
	case config.StoreRedis:
		if cfg.Redis.URL != "" {
			return checkRedisURL(p, idx, w, cfg.Redis.URL)
		}
	}
	return ""
}

// onPersistentVolume reports whether file is on a writable mount of a
// PersistentVolumeClaim (a volume or a volumeClaimTemplate).
func onPersistentVolume(w workload, c *corev1.Container, file string) bool {
	if !filepath.IsAbs(file) {
		return false
	}
	for _, m := range c.VolumeMounts {
		if m.ReadOnly || !strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range w.spec.Volumes {
			if v.Name == m.Name && v.PersistentVolumeClaim != nil {
				return true
			}
		}
		for _, t := range w.claims {
			if t.Name == m.Name {
				return true
			}
		}
	}
	return false
}

// podOrdinal matches the first label of a StatefulSet pod's DNS name.
var podOrdinal = regexp.MustCompile(`^(.+)-([0-9]+)$`)

// checkRedisURL follows FENCE_REDIS_URL to a Service among the objects (the
// host is service, service.namespace[...], or pod.service[...] for a
// StatefulSet pod) and checks the Redis behind it. It returns that
// StatefulSet, or "" when the URL leads outside the objects.
func checkRedisURL(p problems, idx *index, w workload, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	find := func(name, ns string) *corev1.Service {
		for _, s := range idx.services {
			if s.Name == name && s.Namespace == ns {
				return s
			}
		}
		return nil
	}
	// service[.namespace[.svc...]], or pod.service[.namespace[.svc...]]
	// when the first label looks like a StatefulSet pod and the rest names
	// a Service among the objects.
	nsOf := func(rest []string) string {
		if len(rest) >= 1 && rest[0] != "svc" {
			return rest[0]
		}
		return w.ns
	}
	hl := strings.Split(u.Hostname(), ".")
	pod := ""
	svc := find(hl[0], nsOf(hl[1:]))
	if len(hl) >= 2 && podOrdinal.MatchString(hl[0]) {
		if s := find(hl[1], nsOf(hl[2:])); s != nil {
			pod, svc = hl[0], s
		}
	}
	if svc == nil {
		return ""
	}
	ns := svc.Namespace
	port := u.Port()
	if port == "" {
		port = "6379"
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return strconv.Itoa(int(sp.Port)) == port }) {
		p.add("FENCE_REDIS_URL port %s is not a port of Service %s.", port, svc.Name)
	}
	for _, rw := range idx.workloads {
		if rw.ns != ns || len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(rw.meta.Labels)) {
			continue
		}
		if !isRedis(rw) {
			p.add("FENCE_REDIS_URL reaches %s, which runs no redis-server.", rw.obj)
			return rw.obj.String()
		}
		if pod == "" && rw.replicas > 1 {
			p.add("FENCE_REDIS_URL names Service %s, which spreads connections over %d Redis pods that do not share marks: name one pod (%s-0.%s) or use Sentinel.", svc.Name, rw.replicas, rw.obj.Name, svc.Name)
		}
		if pod != "" && (rw.serviceName != svc.Name || !strings.HasPrefix(pod, rw.obj.Name+"-")) {
			p.add("FENCE_REDIS_URL host %s is not a pod of %s through its governing Service.", u.Hostname(), rw.obj)
		}
		return rw.obj.String()
	}
	p.add("FENCE_REDIS_URL reaches Service %s, which selects no workload among the objects.", svc.Name)
	return ""
}

// isRedis reports whether the workload runs redis-server.
func isRedis(w workload) bool {
	return redisContainer(w) != nil
}

func redisContainer(w workload) *corev1.Container {
	for i, c := range w.spec.Containers {
		words := append(slices.Clone(c.Command), c.Args...)
		if slices.ContainsFunc(words, func(s string) bool { return path.Base(s) == "redis-server" }) ||
			strings.Contains(path.Base(strings.SplitN(c.Image, ":", 2)[0]), "redis") && !strings.Contains(c.Image, "exporter") {
			return &w.spec.Containers[i]
		}
	}
	return nil
}

// RedisDurability is what Redis must be told to keep every mark it
// acknowledged: an fsync per write to the append-only file, no eviction.
var RedisDurability = map[string]string{
	"appendonly":       "yes",
	"appendfsync":      "always",
	"maxmemory-policy": "noeviction",
}

// checkRedis checks a Redis workload: its effective configuration (the
// config file, then command-line overrides) keeps marks, on a persistent
// volume, behind a headless Service.
func checkRedis(p problems, idx *index, w workload) {
	c := redisContainer(w)
	p = p.sub("container " + c.Name)
	conf := map[string]string{}
	words := append(slices.Clone(c.Command), c.Args...)
	var flags []string
	for i, word := range words {
		if strings.HasSuffix(word, ".conf") {
			data, err := mountedFile(idx, w, c, word)
			if err != nil {
				p.add("config file %s (in its command or args) cannot be read: %v.", word, err)
			}
			parseRedisConf(conf, string(data))
			flags = words[i+1:]
			break
		}
		if strings.HasPrefix(word, "--") {
			flags = words[i:]
			break
		}
	}
	parseRedisFlags(conf, flags)
	for k, want := range RedisDurability {
		if got := conf[k]; got != want {
			p.add("Redis %s is %q, want %q (marks must survive a crash and never be evicted).", k, got, want)
		}
	}
	dir := conf["dir"]
	if dir == "" {
		p.add("Redis dir is not set: the append-only file must go to the persistent volume.")
	} else if !onPersistentVolume(w, c, dir+"/appendonlydir") {
		p.add("Redis dir %q is not on a persistent volume (a volumeClaimTemplate or a PersistentVolumeClaim).", dir)
	}
	if w.obj.GVK.Kind != "StatefulSet" || len(w.claims) == 0 {
		p.add("Redis must be a StatefulSet with volumeClaimTemplates, so its data outlives the pod.")
	}
	if w.obj.GVK.Kind == "StatefulSet" {
		var svc *corev1.Service
		for _, s := range idx.services {
			if s.Namespace == w.ns && s.Name == w.serviceName {
				svc = s
			}
		}
		switch {
		case w.serviceName == "":
			p.add("spec.serviceName is not set: the Redis pods need a headless governing Service for the pod names FENCE_REDIS_URL uses.")
		case svc == nil:
			p.add("the governing Service %q (spec.serviceName) is not among the objects.", w.serviceName)
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			p.add("the governing Service %s must be headless (clusterIP: None).", svc.Name)
		case len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.meta.Labels)):
			p.add("the governing Service %s does not select the Redis pods.", svc.Name)
		}
	}
}

// parseRedisConf reads redis.conf directives ("name value...") into conf,
// later ones winning, names in lower case.
func parseRedisConf(conf map[string]string, text string) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		conf[strings.ToLower(f[0])] = unquote(strings.Join(f[1:], " "))
	}
}

// parseRedisFlags reads redis-server's "--name value..." arguments.
func parseRedisFlags(conf map[string]string, words []string) {
	name := ""
	var vals []string
	flush := func() {
		if name != "" {
			conf[name] = unquote(strings.Join(vals, " "))
		}
	}
	for _, w := range words {
		if strings.HasPrefix(w, "--") {
			flush()
			name, vals = strings.ToLower(strings.TrimPrefix(w, "--")), nil
			continue
		}
		vals = append(vals, w)
	}
	flush()
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}
