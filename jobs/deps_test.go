package jobs

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The job model sits below the roles and the API: it may use the wire types
// and the workflow types, nothing else of Tempest, so the roles and api can
// both depend on it and it on neither.
func TestImportsOnlyWireAndWorkflow(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"tempest/wire": true, "tempest/workflow": true}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "tempest/") && !allowed[path] {
				t.Errorf("%s imports %s: the job model depends on wire and workflow only", name, path)
			}
		}
	}
}
