// Package deploy renders fenceproxy's Kubernetes manifests (the Kustomize
// component in base/, the overlays under examples/, the authorization
// mode's workload under integrations/authz, and the Helm charts under helm/
// in the tests) without a cluster and checks them; DecodeStream reads
// manifests already rendered (`fenceproxy inject`, `helm template`).
//
// Render runs Kustomize as a library, as `kubectl kustomize` would. Decode
// decodes every rendered object strictly into the typed structs of
// k8s.io/api: an unknown kind or API version, an unknown or misspelled field
// (also one that differs only in case) or a duplicate field is an error, so a
// manifest that the API server would reject or silently prune does not pass.
//
// Check then asserts what fenceproxy's guarantee needs from a pod with the
// sidecar: it is a native sidecar whose environment and routes file pass
// fenceproxy's own config.Load and route checks (and whose keys file, when
// FENCE_TOKEN_KEYS_FILE is set, is mounted, public and parses), every path
// into the pod goes through the sidecar's port (Services and
// NetworkPolicies admit only its ports, and the app either listens on
// loopback without declaring a port or is guarded by NetworkPolicies that
// admit the sidecar's ports alone), the app's own probes can still reach it
// (a named port it declares, not a loopback-only listener: the kubelet
// dials the pod IP from the node), every container is locked down, and the
// Redis that keeps the marks keeps them (AOF with fsync always on a persistent volume,
// no eviction). CheckAuthz checks the workloads that run `fenceproxy authz`,
// the authorization mode that the integrations under integrations/ (Envoy,
// Istio, Traefik, ingress-nginx) ask before each request: its environment
// passes config.LoadAuthz, its keys file the same checks as the sidecar's,
// its listeners are the ports its Service reaches, and it shares one store
// between replicas. A container that runs `fenceproxy authz` is checked by
// CheckAuthz only, whatever its name; run both, as `cmd/render -check`
// does. The files split the checks by concern: check.go (the walk over the
// workloads), check_exposure.go, check_probes.go, check_env.go,
// check_tokens.go, check_store.go, check_pod.go and check_authz.go.
//
// Findings come in two levels. Errors are what breaks fencing's safety or
// keeps fenceproxy from running as the manifests wire it: a Service, policy,
// port or host network that reaches the app without the sidecar, the app
// off loopback with no NetworkPolicy guarding it, an app probe that cannot
// reach the app, a store that can lose, evict or split the marks (memory,
// bolt with several replicas or off a persistent volume, Redis without AOF
// always, off a persistent volume or evicting), an environment that
// config.Load refuses, a keys file that is not mounted or leaks a private
// key, listeners that are not the published ports. Warnings are generic
// hardening and operations: security context, resources, image pinning,
// probes, the grace period, Prometheus annotations, who may reach the admin
// port, the authz workload's availability (replicas, disruption budget,
// rollout) and who may call it. Report.Err and AuthzReport.Err return the
// errors only. Every finding is one sentence that names the workload as
// Kind/namespace/name, the container when there is one, and the field.
//
// This is a separate Go module, so that Kustomize and k8s.io/api stay out of
// the fenceproxy binary's module. Its tests are the check CI runs:
//
//	cd deploy && go test ./...
//
// and `go run ./cmd/render -check examples/sample-app` prints what
// `kubectl kustomize` would and runs the same checks, printing each error
// and warning on stderr and failing on errors only.
package deploy
