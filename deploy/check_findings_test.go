package deploy

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// findingPrefix is how every finding starts: the workload, as
// Kind/namespace/name, then a colon.
var findingPrefix = regexp.MustCompile(`^(Deployment|StatefulSet)/[a-z0-9-]+/[a-z0-9-]+: `)

// messageProblems lists what is wrong with the text of one finding: it must
// name its workload as Kind/namespace/name, hold no double space (a name
// left empty between two words), no empty quoted name (an empty value may
// be reported, as `is ""`), be one line, and end with a period, as the
// sentences of the checks do (or the question mark of a quoted "did you
// mean X?").
func messageProblems(msg string) []string {
	var probs []string
	if !findingPrefix.MatchString(msg) {
		probs = append(probs, "does not start with Kind/namespace/name of its workload")
	}
	if strings.Contains(msg, "  ") {
		probs = append(probs, "has a double space")
	}
	if strings.Contains(strings.ReplaceAll(msg, `is ""`, ""), `""`) {
		probs = append(probs, `has an empty quoted name ""`)
	}
	if strings.Contains(msg, "\n") {
		probs = append(probs, "spans several lines")
	}
	if !strings.HasSuffix(msg, ".") && !strings.HasSuffix(msg, "?") {
		probs = append(probs, "does not end with a period")
	}
	if strings.HasSuffix(msg, "..") || strings.HasSuffix(msg, "?.") || strings.HasSuffix(msg, "!.") {
		probs = append(probs, "ends with two punctuation marks")
	}
	return probs
}

// TestFindingMessages walks every finding, error or warning, of every
// bad-manifest case of TestChecksCanFail, TestAuthzChecksCanFail and
// TestTokenKeysChecks, and holds its text to messageProblems.
func TestFindingMessages(t *testing.T) {
	walk := func(t *testing.T, objs []Object) {
		t.Helper()
		errs, warns := checkBoth(objs)
		if len(errs)+len(warns) == 0 {
			t.Error("the case yields no finding")
		}
		for _, e := range append(errs, warns...) {
			for _, p := range messageProblems(e.Error()) {
				t.Errorf("%s:\n%s", p, e)
			}
		}
	}
	t.Run("sample", func(t *testing.T) {
		docs := sampleJSON(t)
		for _, tc := range sampleBreaks() {
			t.Run(tc.name, func(t *testing.T) {
				s := loadSample(t, docs)
				tc.break_(s)
				walk(t, s.objs)
			})
		}
	})
	t.Run("authz", func(t *testing.T) {
		docs := renderJSON(t, authzDir)
		for _, tc := range authzBreaks(t) {
			t.Run(tc.name, func(t *testing.T) {
				a := loadAuthz(t, docs)
				tc.break_(a)
				walk(t, a.objs)
			})
		}
	})
	t.Run("token keys", func(t *testing.T) {
		docs := renderJSON(t, signedDir)
		for _, tc := range tokenKeyCases(t) {
			if len(tc.want) == 0 {
				continue // a good variant: no finding to read
			}
			t.Run(tc.name, func(t *testing.T) {
				s := loadSigned(t, docs)
				tc.change(s)
				walk(t, s.objs)
			})
		}
	})
}

// TestMessageProblems: the rules of TestFindingMessages catch what they are
// for, such as the unnamed Service port that once read "port  targets".
func TestMessageProblems(t *testing.T) {
	const w = "Deployment/ns/app: "
	for msg, want := range map[string]string{
		w + "Service app port 80 has targetPort 3000, not a port of the sidecar.":  "",
		w + `container app: Redis appendonly is "", want "yes".`:                   "",
		w + "Service app port  targets 3000, not a port of the sidecar.":           "double space",
		w + `envFrom ConfigMap "" is not among the objects.`:                       "empty quoted name",
		w + "container app: securityContext.runAsNonRoot must be true":             "period",
		w + "the environment fails config.Load:\nFENCE_STORE: bad.":                "several lines",
		w + "config.Load fails: FENCE_X: unknown variable; did you mean FENCE_Y?":  "",
		w + "config.Load fails: FENCE_X: unknown variable; did you mean FENCE_Y?.": "two punctuation marks",
		"Service app port 80 has targetPort 3000.":                                 "Kind/namespace/name",
	} {
		got := strings.Join(messageProblems(msg), "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%q: got %q, want a problem containing %q", msg, got, want)
		}
	}
}

// TestWarningsOnlyPass strips the sample app of every hardening property
// Check warns about: each is reported as a warning, and Err still passes,
// since none of them lets a request past the fence or loses a mark.
func TestWarningsOnlyPass(t *testing.T) {
	s := loadSample(t, sampleJSON(t))
	pod := &s.app.Spec.Template.Spec
	pod.SecurityContext = nil
	pod.HostPID = true
	pod.TerminationGracePeriodSeconds = nil
	s.app.Spec.Template.Annotations = nil
	for _, c := range []*corev1.Container{s.sidecar, s.appC} {
		c.SecurityContext = &corev1.SecurityContext{
			Privileged:   ptr.To(true),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
		}
		c.Resources = corev1.ResourceRequirements{}
	}
	s.sidecar.Image = "fenceproxy"
	s.appC.Image = "docker.io/hashicorp/http-echo:latest"
	s.sidecar.LivenessProbe.HTTPGet.Path = "/readyz"
	s.sidecar.ReadinessProbe = nil
	s.policy.Spec.Ingress[1].From = nil // the admin port open to every pod

	rep := Check(s.objs)
	if err := rep.Err(); err != nil {
		t.Fatalf("hardening warnings only, yet Err fails:\n%v", err)
	}
	warnings := errors.Join(rep.Warnings...).Error()
	t.Log(warnings)
	for _, want := range []string{
		"container fenceproxy: securityContext.runAsNonRoot must be true.",
		"container app: securityContext.runAsUser must be a numeric non-root user.",
		"container fenceproxy: securityContext.runAsUser must be 65532",
		"container app: securityContext.readOnlyRootFilesystem must be true.",
		"securityContext.allowPrivilegeEscalation must be false.",
		"securityContext.privileged must not be true.",
		"securityContext.capabilities.drop must contain ALL.",
		"securityContext.seccompProfile.type must be RuntimeDefault",
		"container fenceproxy: resources.requests.cpu must be set.",
		"container app: resources.requests.memory must be set.",
		`image "fenceproxy" needs an explicit tag`,
		`image "docker.io/hashicorp/http-echo:latest" needs an explicit tag`,
		"hostPID/hostIPC must be false.",
		`livenessProbe.httpGet.path is "/readyz", want "/healthz".`,
		"readinessProbe is missing",
		"terminationGracePeriodSeconds 30s is below",
		"prometheus.io/scrape=true",
		"admits the admin port 9090 from everyone",
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("want a warning containing %q", want)
		}
	}
}

// TestAuthzWarningsOnlyPass does the same to the authz workload: one
// replica, no disruption budget, a rollout that takes pods away, no
// NetworkPolicy, no probes, no annotations, a proxy-only variable.
func TestAuthzWarningsOnlyPass(t *testing.T) {
	a := loadAuthz(t, renderJSON(t, authzDir))
	a.dep.Spec.Replicas = ptr.To[int32](1)
	a.dep.Spec.Strategy.RollingUpdate = nil
	a.dep.Spec.Template.Annotations = nil
	a.c.LivenessProbe, a.c.ReadinessProbe = nil, nil
	a.c.SecurityContext.RunAsUser = ptr.To[int64](1000)
	a.env.Data["FENCE_DRAIN"] = "on"
	a.without("PodDisruptionBudget", a.pdb.Name)
	a.without("NetworkPolicy", a.policy.Name)

	errs, warns := checkBoth(a.objs)
	if len(errs) > 0 {
		t.Fatalf("warnings only, yet errors:\n%v", errors.Join(errs...))
	}
	if rep := CheckAuthz(a.objs); rep.Err() != nil || len(rep.Warnings) == 0 {
		t.Fatalf("CheckAuthz: Err %v, %d warnings", rep.Err(), len(rep.Warnings))
	}
	warnings := errors.Join(warns...).Error()
	t.Log(warnings)
	for _, want := range []string{
		"spec.replicas 1",
		"no PodDisruptionBudget selects the pods",
		"spec.strategy.rollingUpdate.maxUnavailable must be 0",
		"no NetworkPolicy restricts ingress",
		"livenessProbe is missing",
		"prometheus.io/scrape=true",
		"FENCE_DRAIN is set",
		"container authz: securityContext.runAsUser must be 65532",
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("want a warning containing %q", want)
		}
	}
}
