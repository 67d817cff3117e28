package worker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Every goroutine of the worker is its lifecycle.Owner's (spawn), so Run
// waits for all of them: a raw go statement or a WaitGroup.Go in the
// package's production code would start one the Owner does not know about.
func TestNoGoroutineOutsideOwner(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement; start it with Worker.spawn", fset.Position(n.Pos()))
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" {
					if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "life" {
						if x, ok := sel.X.(*ast.SelectorExpr); !ok || x.Sel.Name != "life" {
							t.Errorf("%s: %s.Go outside the Owner; use Worker.spawn", fset.Position(n.Pos()), exprName(sel.X))
						}
					}
				}
			}
			return true
		})
	}
}

func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprName(e.X) + "." + e.Sel.Name
	}
	return "?"
}
