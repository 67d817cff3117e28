package rainstorm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"tempest/internal/jobfile"
	"tempest/rainstorm"
)

const programJob = `name: up
workflows:
  - name: up
    type: rainstorm
    source: {generate: {records: 10, keys: 2}}
    stages:
      - {name: upper, op: exec, tasks: 2, command: ./ops/upper.sh -x}
      - {name: count, op: count, key: "2"}
`

// An exec program named by a path relative to the job file travels with
// the job as a blob: the server's parse records it (in the pipeline's
// first task, which holds the spec), the managers wait for it like a file
// source, and of the tasks' params as dispatched (Resolve) only the exec
// tasks get its bytes. Without the upload the server refuses the job at
// the command's line.
func TestRelativeProgramTravelsAsBlob(t *testing.T) {
	const sum = "aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11"
	reg := rainstorm.Registry(rainstorm.ParseOptions{})
	sub, err := jobfile.Parse([]byte(programJob), "up.yaml", reg, jobfile.WithDataBlobs(map[string]string{"./ops/upper.sh": sum}))
	if err != nil {
		t.Fatal(err)
	}
	typ, _ := reg.Lookup(rainstorm.TypeName)
	rt := typ.(rainstorm.Type)
	for i, spec := range sub.Workflows {
		blobs, err := rt.Blobs(spec.Params)
		if want := []string{sum}; err != nil || (i == 0) != slices.Equal(blobs, want) {
			t.Fatalf("task %d names blobs %v (%v); the first task names the program's, the others refer to it", i, blobs, err)
		}
		dispatched, err := rainstorm.Resolve(sub.Workflows[0].Params, spec.Params)
		if err != nil {
			t.Fatal(err)
		}
		if blobs, err := rt.Blobs(dispatched); err != nil || !slices.Equal(blobs, []string{sum}) {
			t.Fatalf("task %d as dispatched names blobs %v (%v), want the program's", i, blobs, err)
		}
		var asked []string
		b, err := rt.AttachBlobs(dispatched, func(s string) ([]byte, error) {
			asked = append(asked, s)
			return []byte("#!/bin/sh\n"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		p, err := rainstorm.DecodeTaskParams(b)
		if err != nil {
			t.Fatal(err)
		}
		exec := p.Stage == 1
		if got := string(p.ProgramData["./ops/upper.sh"]); exec != (got == "#!/bin/sh\n") || exec != (len(asked) == 1) {
			t.Fatalf("task %d (stage %d): program %q, blobs read %v", i, p.Stage, got, asked)
		}
		if !slices.Equal(p.Spec.Stages[0].Command, []string{"./ops/upper.sh", "-x"}) {
			t.Fatalf("command %v", p.Spec.Stages[0].Command)
		}
	}
	exec, err := rainstorm.Resolve(sub.Workflows[0].Params, sub.Workflows[1].Params)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.AttachBlobs(exec, func(string) ([]byte, error) { return nil, errors.New("gone") }); err == nil ||
		!strings.Contains(err.Error(), "./ops/upper.sh") {
		t.Fatalf("a program that cannot be read: %v", err)
	}

	_, err = jobfile.Parse([]byte(programJob), "up.yaml", reg)
	var jfe *jobfile.Error
	if !errors.As(err, &jfe) || !strings.Contains(err.Error(), "up.yaml:7") || !strings.Contains(err.Error(), "was not uploaded with the job") {
		t.Fatalf("a relative program not uploaded: %v", err)
	}
	for _, name := range []string{"awk", "/usr/bin/awk"} {
		if rainstorm.LocalProgram(name) {
			t.Errorf("%s is taken for a program beside the job file", name)
		}
	}
}
