package archcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// modules names the third-party modules by the short names the table
// uses. A module imported by the code but missing here fails the test:
// add it here, to the package rows, and to the "Dependencies and why"
// table.
var modules = map[string]string{
	"cbor":         "github.com/fxamacker/cbor/v2",
	"x/crypto":     "golang.org/x/crypto",
	"x/time":       "golang.org/x/time",
	"x/sys":        "golang.org/x/sys",
	"quic-go":      "github.com/quic-go/quic-go",
	"gobreaker":    "github.com/sony/gobreaker/v2",
	"memberlist":   "github.com/hashicorp/memberlist",
	"bbolt":        "go.etcd.io/bbolt",
	"hdrhistogram": "github.com/HdrHistogram/hdrhistogram-go",
	"yaml":         "go.yaml.in/yaml/v3",
	"goleak":       "go.uber.org/goleak",
	"prometheus":   "github.com/prometheus/client_golang",
	"gjson":        "github.com/tidwall/gjson",
	"x/net":        "golang.org/x/net",
	"humanize":     "github.com/dustin/go-humanize",
	"client_model": "github.com/prometheus/client_model",
	"automemlimit": "github.com/KimMachineGun/automemlimit",
	"protocompile": "github.com/bufbuild/protocompile",
	"grpc":         "google.golang.org/grpc",
	"protobuf":     "google.golang.org/protobuf",
	"websocket":    "github.com/coder/websocket",
	"google/btree": "github.com/google/btree",
}

const module = "tempest"

// pkg is one package as `go list` sees it.
type pkg struct {
	path string   // relative to the module root ("wire", "cmd/gate")
	deps []string // internal package paths and module short names
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not inside the module")
	}
	return filepath.Dir(gomod)
}

// listPackages runs `go list` over the module: a package's dependencies
// are its non-test imports, or, for a package made only of tests (such as
// integration), its test imports without the shared test helpers.
func listPackages(t *testing.T, root string) map[string]pkg {
	t.Helper()
	const format = `{{.ImportPath}}|{{join .GoFiles " "}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`
	cmd := exec.Command("go", "list", "-f", format, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	byModule := make(map[string]string, len(modules))
	for short, mod := range modules {
		byModule[mod] = short
	}
	pkgs := make(map[string]pkg)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 4 {
			t.Fatalf("go list line %q", sc.Text())
		}
		path := strings.TrimPrefix(f[0], module+"/")
		if path == "internal/archcheck" {
			continue
		}
		imports := f[2]
		if strings.TrimSpace(f[1]) == "" {
			imports = f[3]
		}
		seen := map[string]bool{}
		for _, imp := range strings.Fields(imports) {
			var dep string
			switch {
			case strings.HasPrefix(imp, module+"/"):
				dep = strings.TrimPrefix(imp, module+"/")
				if strings.TrimSpace(f[1]) == "" && dep == "testutil" {
					continue
				}
			case !strings.Contains(strings.SplitN(imp, "/", 2)[0], "."):
				continue // standard library
			default:
				for mod, short := range byModule {
					if imp == mod || strings.HasPrefix(imp, mod+"/") {
						dep = short
					}
				}
				if dep == "" {
					t.Errorf("%s imports %s, a module the check does not know: add it to modules in %s", path, imp, "internal/archcheck/arch_test.go")
					continue
				}
			}
			if dep != path && !seen[dep] {
				seen[dep] = true
			}
		}
		p := pkg{path: path}
		for d := range seen {
			p.deps = append(p.deps, d)
		}
		slices.Sort(p.deps)
		pkgs[path] = p
	}
	return pkgs
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	parens     = regexp.MustCompile(`\([^)]*\)`)
)

// tableRows reads the package table: rows of `| `pkg` | owns | depends on |`
// under the header that has a "depends on" column.
func tableRows(t *testing.T, root string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := make(map[string][]string)
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| package |") && strings.Contains(line, "depends on") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			t.Fatalf("ARCHITECTURE.md row %q: want 3 columns", line)
		}
		names := backticked.FindAllStringSubmatch(cells[0], -1)
		if len(names) != 1 {
			t.Fatalf("ARCHITECTURE.md row %q: want one `package` in the first column", line)
		}
		var deps []string
		for _, d := range strings.Split(parens.ReplaceAllString(cells[len(cells)-1], ""), ",") {
			d = strings.Trim(strings.TrimSpace(d), "`")
			if d == "" || d == "—" {
				continue
			}
			deps = append(deps, d)
		}
		slices.Sort(deps)
		rows[names[0][1]] = deps
	}
	if len(rows) == 0 {
		t.Fatal("ARCHITECTURE.md: no package table (a header `| package | owns | depends on |`)")
	}
	return rows
}

func TestArchitectureTableMatchesImports(t *testing.T) {
	root := moduleRoot(t)
	pkgs := listPackages(t, root)
	rows := tableRows(t, root)
	for path, p := range pkgs {
		want, ok := rows[path]
		if !ok {
			t.Errorf("ARCHITECTURE.md has no row for package %s (depends on: %s)", path, strings.Join(p.deps, ", "))
			continue
		}
		if !slices.Equal(want, p.deps) {
			t.Errorf("ARCHITECTURE.md row %s says it depends on [%s]; its imports are [%s]",
				path, strings.Join(want, ", "), strings.Join(p.deps, ", "))
		}
	}
	for path := range rows {
		if _, ok := pkgs[path]; !ok {
			t.Errorf("ARCHITECTURE.md has a row for %s, which is not a package of the module", path)
		}
	}
}

// Every module go.mod requires directly has a line in "Dependencies and
// why", and the check knows its short name.
func TestEveryModuleIsExplained(t *testing.T) {
	root := moduleRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	arch, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, why, ok := strings.Cut(string(arch), "## Dependencies and why")
	if !ok {
		t.Fatal(`ARCHITECTURE.md: no "## Dependencies and why" section`)
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "require"))
		if strings.Contains(line, "// indirect") || !strings.Contains(line, ".") || strings.HasPrefix(line, "go ") || strings.HasPrefix(line, "module ") || strings.HasPrefix(line, "toolchain ") {
			continue
		}
		mod := strings.Fields(line)[0]
		if !strings.Contains(why, fmt.Sprintf("`%s`", mod)) {
			t.Errorf("go.mod requires %s but ARCHITECTURE.md's \"Dependencies and why\" does not explain it", mod)
		}
	}
}
