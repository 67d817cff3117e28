package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"tempest/rainstorm"
	"tempest/workflow"
)

// cliRegistry is the registry the CLI checks job files with: a pipeline's
// `file:` source header and its exec programs are checked here, against
// the files beside the job file, so such mistakes get the job file's line
// before anything is sent.
func cliRegistry(dir string) *workflow.Registry {
	return rainstorm.Registry(rainstorm.ParseOptions{
		OpenFile: func(name string) (io.ReadCloser, error) {
			return os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		},
		LookCommand: func(name string) error {
			if strings.Contains(name, "/") && !filepath.IsAbs(name) {
				name = filepath.Join(dir, name)
			}
			_, err := exec.LookPath(name)
			return err
		},
	})
}
