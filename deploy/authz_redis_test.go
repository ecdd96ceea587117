package deploy

import (
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestAuthzExistingRedis: the authz kustomization uses a Redis the user
// already runs (FENCE_REDIS_URL leads outside its objects, and it renders no
// Redis of its own), and still passes both checks with no finding; the
// bundled Redis is the opt-in component of examples/authz-bundled-redis.
func TestAuthzExistingRedis(t *testing.T) {
	objs := sampleObjects(t, renderJSON(t, filepath.Join(integrationsDir, "authz")))
	if slices.ContainsFunc(objs, func(o Object) bool { return o.GVK.Kind == "StatefulSet" || o.Name == "redis" }) {
		t.Error("the default authz kustomization renders a Redis of its own")
	}
	errs, warns := checkBoth(objs)
	if len(errs)+len(warns) > 0 {
		t.Fatalf("findings: %v %v", errs, warns)
	}
	rep := CheckAuthz(objs)
	if len(rep.Authz) != 1 || rep.Authz[0].Redis != "" || rep.Authz[0].Config.Redis.URL == "" {
		t.Fatalf("want one authz workload on an outside Redis, got %+v", rep.Authz)
	}

	bundled := loadAuthz(t, renderJSON(t, authzDir))
	if got := CheckAuthz(bundled.objs).Authz[0].Redis; got != "StatefulSet/fenceproxy-authz/redis" {
		t.Errorf("with the component, the store is %q, want the bundled StatefulSet", got)
	}
	if _, ok := get[*corev1.ConfigMap](t, bundled.objs, "redis-config").Data["redis.conf"]; !ok {
		t.Error("the bundled Redis has no redis.conf")
	}
}
