package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"tempest/internal/jobfile"
	"tempest/rainstorm"
)

// checkJobFilesInside refuses a job file that names a file outside its own
// folder: a data file, a pipeline's `file:` source or an exec program
// uploaded with the job. tempest submit sends those files to the cluster,
// so a job file from somewhere else (a pull request, a colleague) could
// otherwise make it upload ../../.ssh/id_ed25519 or /etc/hostname. Names
// are resolved after cleaning and following symlinks, so a link beside the
// job file that points out of its folder is refused too. --allow-outside
// skips the check. The refusal is the job file's problem at its line.
func checkJobFilesInside(jobFile []byte, path string, opts ...jobfile.Option) error {
	dir := filepath.Dir(path)
	inside := func(name string) error { return insideDir(dir, name) }
	reg := rainstorm.Registry(rainstorm.ParseOptions{
		OpenFile: func(name string) (io.ReadCloser, error) {
			if err := inside(name); err != nil {
				return nil, err
			}
			return os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		},
		LookCommand: func(name string) error {
			if rainstorm.LocalProgram(name) {
				return inside(name)
			}
			return nil // a program on the workers' PATH: not uploaded
		},
	})
	fromDisk := jobfile.DirDataFiles(dir)
	read := func(name string) ([]byte, error) {
		if err := inside(name); err != nil {
			return nil, err
		}
		return fromDisk(name)
	}
	// TLS files are confined like data files; the reader replaces the
	// caller's (options apply in order).
	sub, err := jobfile.Parse(jobFile, path, reg, append(opts, jobfile.WithDataFiles(read), jobfile.WithTLSFiles(read))...)
	if err != nil {
		return err
	}
	// A file: source is opened at parse time only for its header, so its
	// name is checked here too.
	checked := map[string]bool{}
	for _, spec := range sub.Workflows {
		if spec.Type != rainstorm.TypeName {
			continue
		}
		p, err := rainstorm.DecodeTaskParams(spec.Params)
		if err != nil {
			return err
		}
		if name := p.Spec.Source.File; name != "" && !checked[name] {
			checked[name] = true
			if err := inside(name); err != nil {
				return &jobfile.Error{File: path, Problems: []jobfile.Problem{{
					Path: "workflows." + spec.Name + ".source.file", Message: err.Error()}}}
			}
		}
	}
	return nil
}

// insideDir reports, as an error, a name (relative to dir, or absolute)
// that resolves outside dir once cleaned and its symlinks followed. A name
// that does not exist is left to the reader to report.
func insideDir(dir, name string) error {
	p := filepath.FromSlash(name)
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	base, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if base, err = filepath.Abs(base); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil // missing: the open that follows says so
	}
	if real, err = filepath.Abs(real); err != nil {
		return err
	}
	rel, err := filepath.Rel(base, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is outside the job file's folder (%s); tempest submit uploads only files under it unless given --allow-outside", real, base)
	}
	return nil
}
