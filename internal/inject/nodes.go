package inject

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// The helpers below read and change yaml.Node trees in place, so that what
// they do not touch keeps its order, style and comments.

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// path follows keys from m; nil when one is missing.
func path(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		m = get(m, k)
	}
	return m
}

// scalar is the value of key in m when it is a scalar, else "".
func scalar(m *yaml.Node, key string) string {
	if v := get(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// child returns the value of key in m, adding it (of kind kind) at the end
// of m when it is missing or null.
func child(m *yaml.Node, key string, kind yaml.Kind) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v := m.Content[i+1]
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				*v = yaml.Node{Kind: kind}
			}
			return v
		}
	}
	v := &yaml.Node{Kind: kind}
	m.Content = append(m.Content, strNode(key), v)
	return v
}

// set sets key in mapping m to v, after the key after when key is missing
// and after is present (at the end otherwise).
func set(m *yaml.Node, key string, v *yaml.Node, after string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == after {
			m.Content = append(m.Content[:i+2], append([]*yaml.Node{strNode(key), v}, m.Content[i+2:]...)...)
			return
		}
	}
	m.Content = append(m.Content, strNode(key), v)
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// quoted is a string that must stay a string ("true", a port number).
func quoted(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func intNode(n int32) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(n))}
}

// clone copies a tree deeply (aliases are copied as they are).
func clone(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = clone(k)
	}
	return &c
}
