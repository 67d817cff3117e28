package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"tempest/api"
	"tempest/internal/jobfile"
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
		// A program given as a relative path is a file beside the job file
		// (uploaded with the job); a bare name is looked up in PATH here as
		// a hint, though the workers' PATH is what counts.
		LookCommand: func(name string) error {
			if rainstorm.LocalProgram(name) {
				p, err := filepath.Abs(filepath.Join(dir, filepath.FromSlash(name)))
				if err != nil {
					return err
				}
				// Absolute, because LookPath searches PATH for a name
				// without a separator, and Join(".", "./x") is "x".
				if _, err := exec.LookPath(p); err != nil {
					return fmt.Errorf("not found beside the job file as an executable file (%s): %w", p, err)
				}
				return nil
			}
			_, err := exec.LookPath(name)
			return err
		},
	})
}

// uploadPipelineFiles uploads the `file:` sources of a job's RainStorm
// pipelines as blobs, streamed in chunks (no size cap: the file is never
// read whole), and returns their names mapped to the blobs' sums for the
// submission. The cluster acknowledges the job only once each blob is on a
// majority of managers.
func uploadPipelineFiles(ctx context.Context, c *api.Client, jobFile []byte, path string, stderr io.Writer, opts ...jobfile.Option) (map[string]string, error) {
	dir := filepath.Dir(path)
	sub, err := jobfile.Parse(jobFile, path, cliRegistry(dir), append(opts, jobfile.WithDataFiles(jobfile.DirDataFiles(dir)))...)
	if err != nil {
		return nil, err
	}
	uploaded := map[string]string{}
	for _, spec := range sub.Workflows {
		if spec.Type != rainstorm.TypeName {
			continue
		}
		p, err := rainstorm.DecodeTaskParams(spec.Params)
		if err != nil {
			return nil, err
		}
		// The file source, and exec programs named by a path relative to
		// the job file: the workers run those from the uploaded copy.
		names := []string{p.Spec.Source.File}
		for _, st := range p.Spec.Stages {
			if st.Op == rainstorm.OpExec && len(st.Command) > 0 && rainstorm.LocalProgram(st.Command[0]) {
				names = append(names, st.Command[0])
			}
		}
		for _, name := range names {
			if name == "" || uploaded[name] != "" {
				continue
			}
			sum, size, err := uploadFile(ctx, c, filepath.Join(dir, filepath.FromSlash(name)))
			if err != nil {
				return nil, fmt.Errorf("upload %s: %w", name, err)
			}
			fmt.Fprintf(stderr, "uploaded %s (%d bytes, sha256 %s)\n", name, size, sum[:12])
			uploaded[name] = sum
		}
	}
	return uploaded, nil
}

func uploadFile(ctx context.Context, c *api.Client, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := c.UploadBlob(ctx, sum, f, size, nil); err != nil {
		return "", 0, err
	}
	return sum, size, nil
}
