package jobfile

import "testing"

func TestLineOf(t *testing.T) {
	const file = `name: telespar
workflows:
  - name: by-category
    type: rainstorm
    stages:
      - {name: telespar, op: filter, tasks: 3}
      - name: count
        op: count
        tasks: 40
`
	for path, want := range map[string]int{
		"workflows[0].stages[1].tasks": 9,
		"workflows[0].stages[0].tasks": 6,
		"workflows[0].stages[1]":       7,
		"workflows[0].name":            3,
		"workflows[0].stages[5].tasks": 5, // deepest that exists: stages
		"workflows[2]":                 2,
		"name":                         1,
		"nothing":                      0,
		"workflows[x]":                 2,
		"workflows[0.tasks":            2,
	} {
		if got := LineOf([]byte(file), path); got != want {
			t.Errorf("LineOf(%q) = %d, want %d", path, got, want)
		}
	}
	if got := LineOf([]byte(`{"name": "j", "workflows": [{"name": "a", "tasks": 4}]}`), "workflows[0].tasks"); got != 1 {
		t.Errorf("JSON job file: line %d, want 1", got)
	}
	if got := LineOf([]byte("a: [unclosed"), "a"); got != 0 {
		t.Errorf("unreadable file: line %d, want 0", got)
	}
}

func FuzzLineOf(f *testing.F) {
	f.Add([]byte("workflows:\n  - stages:\n      - tasks: 3\n"), "workflows[0].stages[0].tasks")
	f.Add([]byte("a: b"), "a[1].c")
	f.Fuzz(func(t *testing.T, data []byte, path string) {
		if line := LineOf(data, path); line < 0 {
			t.Fatalf("negative line %d", line)
		}
	})
}
