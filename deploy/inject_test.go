package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/inject"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// injectDir holds the manifests `fenceproxy inject` is tested on.
var injectDir = filepath.Join("..", "internal", "inject", "testdata")

// injected runs inject on one case of injectDir and decodes the output
// strictly; objects of kinds the checks do not read (an autoscaler) are
// left out.
func injected(t *testing.T, c inject.Case) []Object {
	t.Helper()
	in, err := os.ReadFile(filepath.Join(injectDir, "in", c.Name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := inject.Stream(in, c.Options)
	if err != nil {
		t.Fatal(err)
	}
	return decodeStream(t, out)
}

// decodeStream decodes a YAML stream strictly, as cmd/render does for a
// file; kinds the checks do not read (an autoscaler) are left out.
func decodeStream(t *testing.T, stream []byte) []Object {
	t.Helper()
	objs, skipped, err := DecodeStream(stream)
	if err != nil {
		t.Fatalf("strict decoding:\n%v", err)
	}
	if len(skipped) > 0 {
		t.Logf("not checked: %v", skipped)
	}
	return objs
}

// TestInjectPassesTheChecks: what `fenceproxy inject` writes for each
// real-world-style manifest passes Check with no error: the app keeps its
// port and probes, and the NetworkPolicy inject adds is what keeps that port
// from outside the pod. The sidecar itself draws no warning (the app's
// containers, written by their teams, may).
func TestInjectPassesTheChecks(t *testing.T) {
	for _, c := range inject.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			objs := injected(t, c)
			rep := Check(objs)
			if err := rep.Err(); err != nil {
				t.Fatalf("Check:\n%v", err)
			}
			for _, w := range rep.Warnings {
				if strings.Contains(w.Error(), "container "+SidecarName+":") || strings.Contains(w.Error(), "NetworkPolicy") {
					t.Errorf("a warning about what inject wrote: %v", w)
				}
			}
			workloads := 0
			for _, o := range objs {
				if o.GVK.Kind == "Deployment" || o.GVK.Kind == "StatefulSet" {
					workloads++
				}
			}
			if len(rep.Fenced) != workloads || workloads == 0 {
				t.Fatalf("%d of %d workloads fenced", len(rep.Fenced), workloads)
			}
			for _, f := range rep.Fenced {
				if len(f.Services) == 0 || len(f.NetworkPolicies) != 1 || f.Config == nil || f.Config.Store != "redis" {
					t.Errorf("%s: services %v, policies %v", f.Workload, f.Services, f.NetworkPolicies)
				}
			}
		})
	}
}

// TestInjectChecksCanFail: the checks tell a broken injection apart. Each
// case breaks the output of inject one way; Check must report it.
func TestInjectChecksCanFail(t *testing.T) {
	named := inject.Cases()[1] // named-port: the Service and probes name the port
	if named.Name != "named-port" {
		t.Fatal("the cases changed order: update this test")
	}
	app := func(objs []Object) *corev1.Container {
		for _, o := range objs {
			if d, ok := o.Obj.(*appsv1.Deployment); ok && d.Name == "payments" {
				return &d.Spec.Template.Spec.Containers[0]
			}
		}
		t.Fatal("no payments Deployment")
		return nil
	}
	cases := []struct {
		name   string
		break_ func(objs []Object) []Object
		want   string
	}{
		{"policy removed", func(objs []Object) []Object { return withoutObject(objs, "NetworkPolicy", "payments-fenceproxy") },
			"container payments declares port 3000 and no NetworkPolicy keeps it from outside the pod"},
		{"policy admits the app port", func(objs []Object) []Object {
			for _, o := range objs {
				if np, ok := o.Obj.(*networkingv1.NetworkPolicy); ok && np.Name == "payments-fenceproxy" {
					np.Spec.Ingress[0].Ports[0].Port = ptr.To(intstr.FromInt32(3000))
				}
			}
			return objs
		}, "admits port 3000, not a port of the sidecar"},
		// The trap: the app made to listen on loopback and its port
		// dropped, as the loopback rule asked, while its probes still name it.
		{"app port dropped, probes name it", func(objs []Object) []Object {
			c := app(objs)
			c.Ports = nil
			c.Args = []string{"--listen", "127.0.0.1:3000"}
			return objs
		}, `readinessProbe.httpGet.port "http" names no port of the container (it declares none)`},
		{"app on loopback, probe by number", func(objs []Object) []Object {
			c := app(objs)
			c.Args = []string{"--listen", "127.0.0.1:3000"}
			c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(3000)
			return objs
		}, "readinessProbe.httpGet.port 3000: the app listens on 127.0.0.1:3000, loopback only"},
		{"Service back at the app", func(objs []Object) []Object {
			for _, o := range objs {
				if svc, ok := o.Obj.(*corev1.Service); ok && svc.Name == "payments" {
					svc.Spec.Ports[0].TargetPort = intstr.FromString("http")
				}
			}
			return objs
		}, "Service payments port http has targetPort http, not a port of the sidecar"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := tc.break_(injected(t, named))
			rep := Check(objs)
			checkFinding(t, tc.want, errLevel, rep.Errors, rep.Warnings)
		})
	}
}

// TestInjectedSidecarIsTheComponents: inject writes the container the
// Kustomize component (base/sidecar.yaml) adds: the same image policy,
// ports by name, probes, resources and security context; only the
// environment's form differs (env instead of a generated ConfigMap).
func TestInjectedSidecarIsTheComponents(t *testing.T) {
	s := loadSample(t, sampleJSON(t))
	want := s.sidecar.DeepCopy()
	var got *corev1.Container
	for _, o := range injected(t, inject.Cases()[1]) {
		if d, ok := o.Obj.(*appsv1.Deployment); ok {
			for i, c := range d.Spec.Template.Spec.InitContainers {
				if c.Name == SidecarName {
					got = &d.Spec.Template.Spec.InitContainers[i]
				}
			}
		}
	}
	if got == nil {
		t.Fatal("no sidecar in the injected output")
	}
	for _, c := range []*corev1.Container{want, got} {
		c.Image, c.Env, c.EnvFrom = "", nil, nil
	}
	w, _ := yaml.Marshal(want)
	g, _ := yaml.Marshal(got)
	if !bytes.Equal(w, g) {
		t.Errorf("the injected sidecar differs from base/sidecar.yaml's:\nbase:\n%s\ninjected:\n%s", w, g)
	}
}

// TestEitherLoopbackOrPolicy: the checks accept an app on every interface
// with its port declared and a probe on it, when a NetworkPolicy admits the
// sidecar's ports alone (the sample's does).
func TestEitherLoopbackOrPolicy(t *testing.T) {
	s := loadSample(t, sampleJSON(t))
	s.appC.Args[0] = "-listen=:5678"
	s.appC.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 5678}}
	s.appC.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}}
	if err := Check(s.objs).Err(); err != nil {
		t.Fatalf("guarded by the NetworkPolicy, yet:\n%v", err)
	}
	s.without("NetworkPolicy", "sample-app-ingress")
	if err := Check(s.objs).Err(); err == nil || !strings.Contains(err.Error(), "declares port 5678") {
		t.Fatalf("without the policy: %v", err)
	}
}

// TestInjectLeavesTheComponentAlone: inject over what the Kustomize
// component already fenced (the sample app, rendered; --workload leaves its
// Redis out) changes nothing.
func TestInjectLeavesTheComponentAlone(t *testing.T) {
	in, err := Render(sampleDir)
	if err != nil {
		t.Fatal(err)
	}
	opts := inject.Cases()[0].Options
	opts.Workloads = []string{"sample-app"}
	out, err := inject.Stream(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) {
		t.Errorf("inject changed the component's output:\n%s", out)
	}
}
