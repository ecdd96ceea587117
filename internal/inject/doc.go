// Package inject adds fenceproxy to Kubernetes manifests: it is what
// `fenceproxy inject` runs.
//
// Stream reads a YAML stream (several documents, a `kind: List` among them)
// and returns it with every apps/v1 Deployment and StatefulSet given
// fenceproxy as a native sidecar (an init container with restartPolicy
// Always, the settings of deploy/base/sidecar.yaml), each Service that
// selects them sending to fenceproxy's data port instead of the app's, and
// one NetworkPolicy per workload that admits ingress to the pods on
// fenceproxy's ports only. The app's containers are not touched: they keep
// their ports, probes and listen address; the NetworkPolicy is what keeps
// the app's port from being reached from outside the pod.
//
// Documents it does not change are written back byte for byte (other kinds,
// workloads that already have the sidecar, Services already sending to it),
// so injecting twice changes nothing. A changed document is re-encoded by
// go.yaml.in/yaml/v3, which keeps the order of fields and most comments.
//
// Anything it cannot do safely is an error naming the object and what to
// give it: several ports that could be the app's, a Service port that would
// reach an app port fenceproxy does not front, host networking.
package inject
