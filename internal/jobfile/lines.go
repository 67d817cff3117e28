package jobfile

import (
	"strconv"
	"strings"

	"tempest/workflow"
)

// LineOf finds the line of a field in a job file, by the path its
// problems name it with ("workflows[0].stages[1].tasks": plain keys and
// list indexes): for a refusal made after parsing, by a node that never
// saw the file (a manager judging a submission against its datacenter).
// It gives the line of the deepest part of the path the file has, or 0
// when the file cannot be read or has not even the first.
func LineOf(data []byte, path string) int {
	if len(data) > MaxFileSize {
		return 0
	}
	n, _ := readYAML(data)
	line := 0
	for path != "" && n != nil {
		var key string
		index := -1
		switch {
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return line
			}
			i, err := strconv.Atoi(path[1:end])
			if err != nil || i < 0 {
				return line
			}
			index, path = i, path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			key, path = path[:end], path[end:]
		}
		path = strings.TrimPrefix(path, ".")
		switch {
		case index >= 0 && n.Kind == workflow.ListNode && index < len(n.Items):
			n = n.Items[index]
			line = n.Line
		case index < 0 && n.Kind == workflow.MapNode:
			var next *workflow.Node
			for _, f := range n.Fields {
				if f.Key == key {
					next, line = f.Value, f.Line
					break
				}
			}
			n = next
		default:
			return line
		}
	}
	return line
}
