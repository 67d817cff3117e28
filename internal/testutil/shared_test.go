package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// outcomeTB records whether a helper skipped or failed the test, instead
// of ending it.
type outcomeTB struct {
	testing.TB
	skipped, failed string
}

func (o *outcomeTB) Helper()                        {}
func (o *outcomeTB) Skipf(format string, a ...any)  { o.skipped = fmt.Sprintf(format, a...) }
func (o *outcomeTB) Fatalf(format string, a ...any) { o.failed = fmt.Sprintf(format, a...) }

func TestSharedDataBesideTheModule(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "clone")
	if err := os.MkdirAll(filepath.Join(top, "shared", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(top, "shared", "data", "signs.csv")
	if err := os.WriteFile(want, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ci := range []bool{false, true} {
		o := &outcomeTB{TB: t}
		if got := sharedData(o, root, "signs.csv", ci); got != want || o.skipped != "" || o.failed != "" {
			t.Errorf("CI %v: %q (skipped %q, failed %q), want %q", ci, got, o.skipped, o.failed, want)
		}
	}

	o := &outcomeTB{TB: t}
	sharedData(o, root, "absent.csv", false)
	if o.skipped == "" || o.failed != "" {
		t.Errorf("missing outside CI: skipped %q, failed %q; want a skip", o.skipped, o.failed)
	}
	o = &outcomeTB{TB: t}
	sharedData(o, root, "absent.csv", true)
	if o.failed == "" || o.skipped != "" {
		t.Errorf("missing under CI: skipped %q, failed %q; want a failure", o.skipped, o.failed)
	}
}

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "1": true, "false": false, "0": false, "yes": true} {
		t.Setenv("CI", v)
		if got := inCI(); got != want {
			t.Errorf("CI=%q: %v, want %v", v, got, want)
		}
	}
}

func TestModuleRootHoldsGoMod(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	if wd, _ := os.Getwd(); filepath.Join(root, "internal", "testutil") != wd {
		t.Fatalf("module root %s is not two levels above %s", root, wd)
	}
}
