package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// documentStart matches a YAML document start or end line.
var documentStart = regexp.MustCompile(`(?m)^(?:---|\.\.\.)(?:[ \t].*)?$`)

// DecodeStream decodes a YAML stream, as `fenceproxy inject` or `helm
// template` print it, strictly (see DecodeJSON); the items of a List are
// decoded one by one. An object of a kind outside Kinds (an autoscaler, a
// custom resource) is not an error here: it is named in skipped, since the
// checks do not read it. Every other problem is returned at once, each
// naming its document.
func DecodeStream(stream []byte) (objs []Object, skipped []string, err error) {
	var problems []error
	for i, doc := range documentStart.Split(string(stream), -1) {
		var probe map[string]any
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			problems = append(problems, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		if len(probe) == 0 {
			continue // empty, or comments only
		}
		if probe["apiVersion"] == "v1" && probe["kind"] == "List" {
			var l corev1.List
			if err := yaml.UnmarshalStrict([]byte(doc), &l); err != nil {
				problems = append(problems, fmt.Errorf("document %d (List): %w", i+1, err))
				continue
			}
			for _, it := range l.Items {
				objs, skipped, problems = decodeOne(it.Raw, objs, skipped, problems)
			}
			continue
		}
		data, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			problems = append(problems, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		objs, skipped, problems = decodeOne(data, objs, skipped, problems)
	}
	return objs, skipped, errors.Join(problems...)
}

func decodeOne(data []byte, objs []Object, skipped []string, problems []error) ([]Object, []string, []error) {
	o, err := DecodeJSON(bytes.TrimSpace(data))
	var unknown *UnknownKindError
	switch {
	case errors.As(err, &unknown):
		skipped = append(skipped, unknown.Object)
	case err != nil:
		problems = append(problems, err)
	default:
		objs = append(objs, o)
	}
	return objs, skipped, problems
}

// UnknownKindError is DecodeJSON's error for a kind outside Kinds.
type UnknownKindError struct {
	Object string // Kind/namespace/name
	GVK    string
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("%s: unknown kind %s (known: %v)", e.Object, e.GVK, knownKinds())
}
