package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Object is one rendered manifest decoded into its k8s.io/api type.
type Object struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
	// Obj is a pointer to the typed struct of GVK (see Kinds), e.g.
	// *appsv1.Deployment.
	Obj any
}

// String names the object as kubectl does: Kind/namespace/name.
func (o Object) String() string {
	if o.Namespace == "" {
		return o.GVK.Kind + "/" + o.Name
	}
	return o.GVK.Kind + "/" + o.Namespace + "/" + o.Name
}

// Kinds are the kinds the manifests may contain, each with a constructor of
// its typed struct. Anything else (another kind, an older or newer API
// version, a custom resource) is an error in Decode: add it here, with its
// checks, when the manifests start using it.
var Kinds = map[schema.GroupVersionKind]func() any{
	corev1.SchemeGroupVersion.WithKind("Namespace"):             func() any { return new(corev1.Namespace) },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):             func() any { return new(corev1.ConfigMap) },
	corev1.SchemeGroupVersion.WithKind("Secret"):                func() any { return new(corev1.Secret) },
	corev1.SchemeGroupVersion.WithKind("Service"):               func() any { return new(corev1.Service) },
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):        func() any { return new(corev1.ServiceAccount) },
	appsv1.SchemeGroupVersion.WithKind("Deployment"):            func() any { return new(appsv1.Deployment) },
	appsv1.SchemeGroupVersion.WithKind("StatefulSet"):           func() any { return new(appsv1.StatefulSet) },
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"):   func() any { return new(networkingv1.NetworkPolicy) },
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"): func() any { return new(policyv1.PodDisruptionBudget) },
	// The Prometheus Operator's alert rules (deploy/monitoring).
	monitoringv1.SchemeGroupVersion.WithKind(monitoringv1.PrometheusRuleKind): func() any { return new(monitoringv1.PrometheusRule) },
}

// kustomizer builds with the options of `kubectl kustomize`, in the legacy
// order (namespaces first), so the output can be piped to `kubectl apply -f -`.
func kustomizer() *krusty.Kustomizer {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	return krusty.MakeKustomizer(opts)
}

// ErrNoEnvGenerator is returned by Build when a kustomization includes the
// component deploy/base without generating the ConfigMap fenceproxy-env
// that the component merges fenceproxy's ports into (Kustomize itself only
// says that the ConfigMap "does not exist; cannot merge or replace").
var ErrNoEnvGenerator = errors.New("the fenceproxy component (deploy/base) merges its settings into a ConfigMap fenceproxy-env that your kustomization must generate: add\n" +
	"  configMapGenerator:\n" +
	"    - name: fenceproxy-env\n" +
	"      literals:\n" +
	"        - FENCE_UPSTREAM_URL=http://127.0.0.1:<app port>\n" +
	"        - FENCE_REDIS_URL=redis://<redis host>:6379/0\n" +
	"(see deploy/examples/sample-app/kustomization.yaml)")

// Build runs Kustomize on the kustomization in dir, from disk.
func Build(dir string) (resmap.ResMap, error) {
	m, err := kustomizer().Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "cannot merge or replace") && strings.Contains(msg, "fenceproxy-env") {
			return nil, fmt.Errorf("kustomize build %s: %w\n(kustomize: %v)", dir, ErrNoEnvGenerator, err)
		}
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return m, nil
}

// Render returns the YAML stream `kubectl kustomize dir` prints.
func Render(dir string) ([]byte, error) {
	m, err := Build(dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// Decode decodes every object of m strictly into its typed struct (see
// Kinds). It returns every problem at once, each naming the object.
func Decode(m resmap.ResMap) ([]Object, error) {
	var objs []Object
	var problems []error
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			problems = append(problems, fmt.Errorf("%s/%s: %w", r.GetKind(), r.GetName(), err))
			continue
		}
		o, err := DecodeJSON(data)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		objs = append(objs, o)
	}
	return objs, errors.Join(problems...)
}

// DecodeYAML is Decode for one YAML document.
func DecodeYAML(doc []byte) (Object, error) {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Object{}, err
	}
	return DecodeJSON(data)
}

// DecodeJSON decodes one object strictly: its apiVersion and kind must be in
// Kinds; an unknown field, a field spelled in another case or a duplicate
// field is an error.
func DecodeJSON(data []byte) (Object, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.UnmarshalCaseSensitivePreserveInts(data, &meta); err != nil {
		return Object{}, err
	}
	gv, err := schema.ParseGroupVersion(meta.APIVersion)
	if err != nil {
		return Object{}, fmt.Errorf("%s/%s: %w", meta.Kind, meta.Metadata.Name, err)
	}
	o := Object{GVK: gv.WithKind(meta.Kind), Namespace: meta.Metadata.Namespace, Name: meta.Metadata.Name}
	mk, ok := Kinds[o.GVK]
	if !ok {
		return Object{}, &UnknownKindError{Object: o.String(), GVK: o.GVK.String()}
	}
	o.Obj = mk()
	strict, err := json.UnmarshalStrict(data, o.Obj)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", o, err)
	}
	if len(strict) > 0 {
		return Object{}, fmt.Errorf("%s: %w", o, errors.Join(strict...))
	}
	return o, nil
}

func knownKinds() []string {
	var ks []string
	for gvk := range Kinds {
		ks = append(ks, gvk.GroupVersion().String()+" "+gvk.Kind)
	}
	slices.Sort(ks)
	return ks
}

// Kustomization is a kustomization file found under a directory.
type Kustomization struct {
	Dir  string // the directory holding it
	Kind string // Kustomization or Component
	// Components are the directories this kustomization includes as
	// components, cleaned and relative to the same root as Dir.
	Components []string
}

// kustomizationFileNames are the names Kustomize looks for, in its order.
var kustomizationFileNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// FindKustomizations returns every kustomization under root, in walk order.
func FindKustomizations(root string) ([]Kustomization, error) {
	var ks []Kustomization
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !slices.Contains(kustomizationFileNames, d.Name()) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k struct {
			Kind       string   `json:"kind"`
			Components []string `json:"components"`
		}
		// Not strict: Kustomize itself validates the file when it builds it.
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		dir := filepath.Dir(path)
		kz := Kustomization{Dir: dir, Kind: k.Kind}
		if kz.Kind == "" {
			kz.Kind = "Kustomization"
		}
		for _, c := range k.Components {
			kz.Components = append(kz.Components, filepath.Join(dir, c))
		}
		ks = append(ks, kz)
		return nil
	})
	return ks, err
}
