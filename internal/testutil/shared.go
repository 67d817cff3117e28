package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// SharedData returns the absolute path of file name in the project's shared
// data folder, shared/data beside the module's root directory: a clone has
// shared/ next to it, on a developer's machine and in CI alike.
//
// Where the file is missing the test is skipped, saying so, unless CI is
// set: there it fails, since a test that skips reports ok and proves
// nothing.
func SharedData(tb testing.TB, name string) string {
	tb.Helper()
	root, err := ModuleRoot()
	if err != nil {
		tb.Fatal(err)
		return ""
	}
	return sharedData(tb, root, name, inCI())
}

func sharedData(tb testing.TB, root, name string, ci bool) string {
	tb.Helper()
	p := filepath.Join(filepath.Dir(root), "shared", "data", filepath.FromSlash(name))
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return p
	case ci:
		tb.Fatalf("shared data %s is missing under CI (%v): CI lays shared/ beside the clone", p, err)
	default:
		tb.Skipf("shared data %s is missing (%v): put the project's shared/ beside the clone to run this test", p, err)
	}
	return ""
}

// inCI reports whether CI is set (to anything that is not a false boolean).
func inCI() bool {
	v := os.Getenv("CI")
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// ModuleRoot returns the directory holding the go.mod of the package under
// test, found by walking up from the working directory (a test runs in its
// package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("module root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root: no go.mod above the working directory")
		}
		dir = parent
	}
}
