package inject

// Case is one manifest of testdata/in and the options it is injected
// with. The golden outputs are testdata/out/<Name>.yaml; the deploy module's
// tests pass each output through the deploy checks.
type Case struct {
	Name    string
	Options Options
}

// Cases are the real-world-style manifests inject is tested on.
func Cases() []Case {
	base := Options{Image: "fenceproxy:v0.0.1", RedisURL: "redis://redis-0.redis.fenceproxy.svc:6379/0"}
	with := func(f func(o *Options)) Options { o := base; f(&o); return o }
	return []Case{
		// The app's port is 8080: fenceproxy takes 8081.
		{"numeric-port", base},
		// The routes from a ConfigMap of the stream.
		{"named-port", with(func(o *Options) { o.RoutesConfigMap = "fenceproxy-routes" })},
		// The Service says which of the two containers' ports is the app's.
		{"several-containers", base},
		// The store's URL from a Secret of the stream.
		{"statefulset", Options{Image: base.Image, RedisSecret: "fenceproxy-redis"}},
		{"two-deployments", base},
		{"list", with(func(o *Options) { o.AdminPort = 9901 })},
		// What `kubectl get deploy,svc -o json` prints: block YAML out.
		{"kubectl-json", base},
	}
}
