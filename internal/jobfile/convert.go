package jobfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"tempest/workflow"
)

// MaxDepth bounds nesting. A job file needs about six levels (workflows,
// a workflow, steps, a step, headers, a header); yaml.v3's own limit is
// 10000, which is far more recursion than a job file has any use for.
const MaxDepth = 32

// maxKeyLen bounds mapping keys: keys become parts of field paths, which are
// repeated in every problem reported below them.
const maxKeyLen = 256

// readYAML parses one YAML (or JSON) document into a workflow.Node tree,
// refusing what a job file has no use for and what makes YAML dangerous to
// accept from strangers:
//   - anchors and aliases, which are how "billion laughs" documents expand
//     a few hundred bytes into gigabytes (yaml.v3 limits the expansion ratio
//     when decoding into Go values; refusing aliases outright is simpler, and
//     the tree is never expanded because aliases are never followed);
//   - merge keys (<<), which only work through aliases;
//   - custom and binary tags, which have no meaning in a job file;
//   - duplicate keys, which yaml.v3's Node API does not check and which
//     would silently let the later value win;
//   - more than one document, and nesting deeper than MaxDepth.
//
// It returns the root (nil if there is none) and every problem found.
func readYAML(data []byte) (*workflow.Node, []Problem) {
	c := &converter{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []Problem{{Message: "job file is empty"}}
		}
		return nil, []Problem{yamlProblem(err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		c.add(0, "", "%s", yamlProblem(err).Message)
	case len(extra.Content) > 0:
		c.add(extra.Line, "", "job file must hold one YAML document; a second one starts here")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, append(c.problems, Problem{Message: "job file is empty"})
	}
	root := c.node(doc.Content[0], "", 1)
	return root, c.problems
}

// yamlProblem turns yaml.v3's "yaml: line 7: did not find expected key"
// into a problem at line 7.
func yamlProblem(err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil {
				return Problem{Line: line, Message: "invalid YAML: " + text}
			}
		}
	}
	return Problem{Message: "invalid YAML: " + msg}
}

type converter struct {
	problems []Problem
	// aliasSeen: anchors and aliases are reported once; a file built on
	// them would otherwise bury everything else.
	aliasSeen bool
}

func (c *converter) alias(line int, path, format string, args ...any) {
	if !c.aliasSeen {
		c.aliasSeen = true
		c.add(line, path, format, args...)
	}
}

func (c *converter) add(line int, path, format string, args ...any) {
	c.problems = append(c.problems, Problem{Line: line, Path: path, Message: fmt.Sprintf(format, args...)})
}

// refused stands in for a value whose problem is reported here, so readers
// neither trip over a nil nor pile a second complaint onto the first.
func refused(line int) *workflow.Node {
	return &workflow.Node{Kind: workflow.ScalarNode, Line: line, Invalid: true}
}

func (c *converter) node(n *yaml.Node, path string, depth int) *workflow.Node {
	if depth > MaxDepth {
		c.add(n.Line, path, "nested more than %d levels deep", MaxDepth)
		return refused(n.Line)
	}
	if n.Anchor != "" {
		c.alias(n.Line, path, "anchors (&%s) and aliases are not supported", n.Anchor)
	}
	switch n.Kind {
	case yaml.AliasNode:
		c.alias(n.Line, path, "aliases (*%s) and anchors are not supported", n.Value)
		return refused(n.Line)
	case yaml.ScalarNode:
		return c.scalar(n, path)
	case yaml.MappingNode:
		if tag := n.ShortTag(); tag != "!!map" {
			c.add(n.Line, path, "tag %s is not supported", tag)
		}
		return c.mapping(n, path, depth)
	case yaml.SequenceNode:
		if tag := n.ShortTag(); tag != "!!seq" {
			c.add(n.Line, path, "tag %s is not supported", tag)
		}
		out := &workflow.Node{Kind: workflow.ListNode, Line: n.Line, Items: make([]*workflow.Node, len(n.Content))}
		for i, it := range n.Content {
			out.Items[i] = c.node(it, workflow.IndexPath(path, i), depth+1)
		}
		return out
	default:
		c.add(n.Line, path, "unexpected YAML node")
		return refused(n.Line)
	}
}

func (c *converter) mapping(n *yaml.Node, path string, depth int) *workflow.Node {
	out := &workflow.Node{Kind: workflow.MapNode, Line: n.Line}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			c.add(k.Line, path, "keys must be plain scalars, not %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			c.add(k.Line, path, "merge keys (<<) are not supported")
			continue
		}
		if k.Anchor != "" {
			c.alias(k.Line, path, "anchors (&%s) and aliases are not supported", k.Anchor)
		}
		key := k.Value
		if len(key) > maxKeyLen {
			c.add(k.Line, path, "key of %d bytes is longer than %d", len(key), maxKeyLen)
			continue
		}
		if line, dup := first[key]; dup {
			c.add(k.Line, path, "duplicate key %q (first at line %d)", key, line)
			continue
		}
		first[key] = k.Line
		out.Fields = append(out.Fields, workflow.Field{
			Key: key, Line: k.Line, Value: c.node(v, workflow.JoinPath(path, key), depth+1),
		})
	}
	return out
}

func (c *converter) scalar(n *yaml.Node, path string) *workflow.Node {
	out := &workflow.Node{Kind: workflow.ScalarNode, Line: n.Line, Text: n.Value}
	switch tag := n.ShortTag(); tag {
	case "!!null":
	case "!!str", "!!timestamp":
		// A timestamp is kept as written: no job-file key takes a date.
		out.Value = n.Value
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.add(n.Line, path, "invalid boolean %q", n.Value)
			return refused(n.Line)
		}
		out.Value = b
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			c.add(n.Line, path, "integer %s is out of range", n.Value)
			return refused(n.Line)
		}
		out.Value = i
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			c.add(n.Line, path, "invalid number %q", n.Value)
			return refused(n.Line)
		}
		out.Value = f
	default:
		c.add(n.Line, path, "tag %s is not supported", tag)
		return refused(n.Line)
	}
	return out
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		return "a scalar"
	}
}
