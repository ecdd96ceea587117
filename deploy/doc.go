// Package deploy renders fenceproxy's Kubernetes manifests (the Kustomize
// component in base/ and the overlays under examples/) without a cluster and
// checks them.
//
// Render runs Kustomize as a library, as `kubectl kustomize` would. Decode
// decodes every rendered object strictly into the typed structs of
// k8s.io/api: an unknown kind or API version, an unknown or misspelled field
// (also one that differs only in case) or a duplicate field is an error, so a
// manifest that the API server would reject or silently prune does not pass.
// Check then asserts what fenceproxy's guarantee needs from a pod: the sidecar
// is a native sidecar whose environment and routes file pass fenceproxy's own
// config.Load and route checks, every path into the pod goes through the
// sidecar's port (Service, NetworkPolicy, an app on loopback only), every
// container is locked down, and the Redis that keeps the marks keeps them
// (AOF with fsync always on a persistent volume, no eviction).
//
// This is a separate Go module, so that Kustomize and k8s.io/api stay out of
// the fenceproxy binary's module. Its tests are the check CI runs:
//
//	cd deploy && go test ./...
//
// and `go run ./cmd/render -check examples/sample-app` prints what
// `kubectl kustomize` would and runs the same checks.
package deploy
