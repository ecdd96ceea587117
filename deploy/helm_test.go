package deploy

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var helmDir = "helm"

// loadChart loads the chart in helm/name, with the charts it depends on
// from helm/ (what `helm dependency update` would copy into charts/).
func loadChart(t *testing.T, name string) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join(helmDir, name))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ch.Metadata.Dependencies {
		dep, err := loader.Load(filepath.Join(helmDir, d.Name))
		if err != nil {
			t.Fatal(err)
		}
		ch.AddDependency(dep)
	}
	return ch
}

// renderChart renders a chart with Helm's own engine, as `helm template`
// does, and decodes every object strictly.
func renderChart(t *testing.T, ch *chart.Chart, values map[string]any) ([]Object, error) {
	t.Helper()
	if err := chartutil.ProcessDependenciesWithMerge(ch, values); err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "shop", Namespace: "shop", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	var objs []Object
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(strings.TrimPrefix(doc, "\n")) == "" || onlyComments(doc) {
				continue
			}
			o, err := DecodeYAML([]byte(doc))
			if err != nil {
				t.Fatalf("%s: strict decoding: %v\n%s", name, err, doc)
			}
			// helm install puts every object in the release's namespace.
			o.Namespace = "shop"
			o.Obj.(metav1.Object).SetNamespace("shop")
			objs = append(objs, o)
		}
	}
	return objs, nil
}

func onlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// redisSecret is a Secret of the user's that holds FENCE_REDIS_URL, as the
// charts' existingSecret values expect it in the release's namespace.
func redisSecret(name string) Object {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		StringData: map[string]string{"url": "redis://redis-0.redis.data.svc:6379/0"}}
	return Object{GVK: corev1.SchemeGroupVersion.WithKind("Secret"), Namespace: "shop", Name: name, Obj: s}
}

// TestHelmAuthzChart renders helm/fenceproxy-authz for each way of giving
// it a store and runs the checks Kustomize's output passes: no error, no
// warning.
func TestHelmAuthzChart(t *testing.T) {
	routes := `routes:
  - name: order-writes
    methods: [PUT, DELETE]
    path: /orders/{orderID:uint}
    resource: orders/{orderID}
`
	cases := []struct {
		name   string
		values map[string]any
		extra  []Object
		redis  string // the Redis StatefulSet the checks find, if bundled
	}{
		{"existing Redis by URL", map[string]any{"redis": map[string]any{"url": "redis://redis-0.redis.data.svc:6379/0"}, "routes": routes}, nil, ""},
		{"existing Redis by Secret", map[string]any{"redis": map[string]any{"existingSecret": map[string]any{"name": "fenceproxy-redis"}}}, []Object{redisSecret("fenceproxy-redis")}, ""},
		{"bundled Redis", map[string]any{"redis": map[string]any{"bundled": map[string]any{"enabled": true}}, "routes": routes}, nil, "StatefulSet/shop/shop-fenceproxy-authz-redis"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := renderChart(t, loadChart(t, "fenceproxy-authz"), tc.values)
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, tc.extra...)
			errs, warns := checkBoth(objs)
			if len(errs) > 0 {
				t.Errorf("checks, errors:\n%v", errors.Join(errs...))
			}
			if len(warns) > 0 {
				t.Errorf("checks, warnings:\n%v", errors.Join(warns...))
			}
			rep := CheckAuthz(objs)
			if len(rep.Authz) != 1 {
				t.Fatalf("want one authz workload, got %+v", rep.Authz)
			}
			if z := rep.Authz[0]; z.Redis != tc.redis || z.Config == nil || z.Config.Store != "redis" {
				t.Errorf("store: Redis %q (want %q), config %+v", z.Redis, tc.redis, z.Config)
			}
			bundled := slices.ContainsFunc(objs, func(o Object) bool { return o.GVK.Kind == "StatefulSet" })
			if bundled != (tc.redis != "") {
				t.Errorf("a Redis StatefulSet is rendered: %v", bundled)
			}
		})
	}
}

// TestHelmAuthzChartNeedsAStore: without a store, or with two, rendering
// fails with a message naming the values to set.
func TestHelmAuthzChartNeedsAStore(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"none": {},
		"two":  {"redis": map[string]any{"url": "redis://r:6379/0", "bundled": map[string]any{"enabled": true}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderChart(t, loadChart(t, "fenceproxy-authz"), values)
			if err == nil || !strings.Contains(err.Error(), "set exactly one of redis.url, redis.existingSecret.name or redis.bundled.enabled=true") {
				t.Errorf("want the message naming the store values, got %v", err)
			}
		})
	}
}

// TestHelmSidecarTemplate renders helm/example-app, an app chart written
// the usual way, which includes the fenceproxy-sidecar library's
// templates. With fenceproxy.enabled the output passes Check with no error
// and no warning: the app keeps its port and its probe, the Service goes
// to fenceproxy, the NetworkPolicy guards the app's port. Without it, the
// app renders alone and unchanged.
func TestHelmSidecarTemplate(t *testing.T) {
	on := func(fp map[string]any) map[string]any {
		v := map[string]any{"enabled": true}
		for k, x := range fp {
			v[k] = x
		}
		return map[string]any{"fenceproxy": v}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		extra  []Object
	}{
		{"Redis by URL", on(map[string]any{"redis": map[string]any{"url": "redis://redis-0.redis.data.svc:6379/0"}}), nil},
		{"Redis by Secret", on(map[string]any{"redis": map[string]any{"existingSecret": map[string]any{"name": "fenceproxy-redis"}}}), []Object{redisSecret("fenceproxy-redis")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := renderChart(t, loadChart(t, "example-app"), tc.values)
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, tc.extra...)
			rep := Check(objs)
			if err := rep.Err(); err != nil {
				t.Errorf("Check, errors:\n%v", err)
			}
			if len(rep.Warnings) > 0 {
				t.Errorf("Check, warnings:\n%v", errors.Join(rep.Warnings...))
			}
			if len(rep.Fenced) != 1 || len(rep.Fenced[0].NetworkPolicies) != 1 || len(rep.Fenced[0].Services) != 1 {
				t.Fatalf("fenced: %+v", rep.Fenced)
			}
		})
	}

	t.Run("off", func(t *testing.T) {
		objs, err := renderChart(t, loadChart(t, "example-app"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep := Check(objs); len(rep.Fenced) != 0 {
			t.Errorf("fenceproxy is off, yet fenced: %+v", rep.Fenced)
		}
		for _, o := range objs {
			if svc, ok := o.Obj.(*corev1.Service); ok && svc.Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("the Service targets %s, want the app's port http", svc.Spec.Ports[0].TargetPort.String())
			}
			if o.GVK.Kind == "NetworkPolicy" {
				t.Errorf("fenceproxy is off, yet %s is rendered", o)
			}
		}
	})

	t.Run("no store", func(t *testing.T) {
		_, err := renderChart(t, loadChart(t, "example-app"), on(nil))
		if err == nil || !strings.Contains(err.Error(), "fenceproxy: set redis.url, redis.existingSecret.name or envFrom") {
			t.Errorf("want the message naming the store values, got %v", err)
		}
	})
}
