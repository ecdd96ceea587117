package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/inject"
)

const injectUsage = `usage: fenceproxy inject [flags] [FILE...]

Reads Kubernetes YAML (the FILEs in order, or stdin when there are none or
FILE is -) and writes it to stdout with fenceproxy added to every apps/v1
Deployment and StatefulSet: a native sidecar (an init container with
restartPolicy Always), each Service selecting them sent to its port, and a
NetworkPolicy per workload admitting ingress on fenceproxy's ports only. The
app's containers are not changed. Other objects, and workloads that already
have the sidecar, are written back as they were: injecting twice changes
nothing. Flags go before the files.

  fenceproxy inject --redis-url redis://redis-0.redis:6379/0 app.yaml | kubectl apply -f -
  kubectl get deploy,svc -o yaml | fenceproxy inject --redis-secret fenceproxy-redis | kubectl apply -f -
`

// injectCmd runs `fenceproxy inject`.
func injectCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	var o inject.Options
	fs.StringVar(&o.Image, "image", defaultImage(), "fenceproxy's image")
	fs.StringVar(&o.RedisURL, "redis-url", "", "FENCE_REDIS_URL for the sidecar, written into the manifests")
	fs.StringVar(&o.RedisSecret, "redis-secret", "", "NAME[:KEY]: read FENCE_REDIS_URL from this Secret (key default \""+inject.DefaultSecretKey+"\")")
	fs.StringVar(&o.EnvFrom, "env-from", "", "a ConfigMap of further FENCE_* settings (envFrom); what inject sets wins")
	fs.StringVar(&o.RoutesConfigMap, "routes-configmap", "", "a ConfigMap with a routes.yaml key, mounted as FENCE_ROUTES_FILE (default: no routes file, the default rule)")
	appPorts := portFlag{}
	fs.Var(appPorts, "app-port", "[WORKLOAD=]PORT: the app's port (name or number) when its pod declares several (repeatable)")
	var workloads listFlag
	fs.Var(&workloads, "workload", "inject only this Deployment or StatefulSet (repeatable; default: all)")
	data := fs.Int("port", 0, fmt.Sprintf("fenceproxy's data port (default: the first free from %d)", inject.DefaultDataPort))
	admin := fs.Int("admin-port", 0, fmt.Sprintf("fenceproxy's admin port (default: the first free from %d)", inject.DefaultAdminPort))
	fs.StringVar(&o.MetricsNamespace, "metrics-namespace", inject.DefaultMetricsNamespace, "namespace whose pods may reach the admin port (Prometheus)")
	if helped, err := parseFlags(fs, args, injectUsage, stdout); helped || err != nil {
		return err
	}
	for _, p := range []*int{data, admin} {
		if *p < 0 || *p > 65535 {
			return &usageError{fmt.Sprintf("port %d is out of range\n%s", *p, flagsUsage(fs, injectUsage))}
		}
	}
	o.DataPort, o.AdminPort = int32(*data), int32(*admin)
	o.AppPorts, o.Workloads = appPorts, workloads

	in, err := readInputs(fs.Args(), stdin)
	if err != nil {
		return err
	}
	out, err := inject.Stream(in, o)
	if errors.Is(err, inject.ErrNoStore) {
		return &usageError{fmt.Sprintf("%v\n%s", err, flagsUsage(fs, injectUsage))}
	}
	if err != nil {
		return fmt.Errorf("inject: nothing written:\n%w", err)
	}
	_, err = stdout.Write(out)
	return err
}

// readInputs concatenates the files (stdin for none or "-") as one stream.
func readInputs(files []string, stdin io.Reader) ([]byte, error) {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var all []byte
	for i, f := range files {
		var b []byte
		var err error
		if f == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, err
		}
		if i > 0 {
			if len(all) > 0 && all[len(all)-1] != '\n' {
				all = append(all, '\n')
			}
			all = append(all, "---\n"...)
		}
		all = append(all, b...)
	}
	return all, nil
}

// releaseTag is a version that is also an image tag (a release build).
var releaseTag = regexp.MustCompile(`^v[0-9][0-9A-Za-z._-]*$`)

// defaultImage is the image of this very version, so that inject and the
// binary agree; a development build has no such tag and says so.
func defaultImage() string {
	if v := buildVersion(); releaseTag.MatchString(v) {
		return "fenceproxy:" + v
	}
	return "fenceproxy:dev"
}

// portFlag collects --app-port [WORKLOAD=]PORT values.
type portFlag map[string]string

func (p portFlag) String() string { return "" }

func (p portFlag) Set(v string) error {
	w, port, ok := strings.Cut(v, "=")
	if !ok {
		w, port = "", v
	}
	if port == "" {
		return fmt.Errorf("want [WORKLOAD=]PORT, got %q", v)
	}
	if _, dup := p[w]; dup {
		return fmt.Errorf("the app port of %q is given twice", w)
	}
	p[w] = port
	return nil
}

// listFlag collects a repeatable flag's values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
