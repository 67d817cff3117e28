package rainstorm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tempest/internal/jobfile"
	"tempest/wire"
)

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestPermits: exec is off without a policy, and on only for the listed
// programs; a path: source only under a listed directory, however the
// path is spelt.
func TestPermits(t *testing.T) {
	upload := sumOf([]byte("#!/bin/sh\n"))
	c := &wire.Confinement{Exec: true, ExecPrograms: []string{"/usr/bin/awk"}, ExecSums: []string{upload}, SourceDirs: []string{"/data/in"}}
	for _, tc := range []struct {
		c    *wire.Confinement
		n    Need
		want bool
	}{
		{nil, Need{Program: "/usr/bin/awk"}, false},
		{&wire.Confinement{ExecPrograms: []string{"/usr/bin/awk"}}, Need{Program: "/usr/bin/awk"}, false}, // not enabled
		{c, Need{Program: "/usr/bin/awk"}, true},
		{c, Need{Program: "/usr/bin/../bin/awk"}, true},
		{c, Need{Program: "awk"}, true},
		{c, Need{Program: "/bin/sh"}, false},
		{c, Need{Program: "sh"}, false},
		{c, Need{Program: "./op.sh", Sum: upload}, true},
		{c, Need{Program: "./op.sh", Sum: strings.ToUpper(upload)}, true},
		{c, Need{Program: "./op.sh", Sum: sumOf([]byte("other"))}, false},
		{c, Need{Program: "./op.sh"}, false}, // relative, not uploaded
		{nil, Need{Path: "/data/in/a.csv"}, false},
		{c, Need{Path: "/data/in/a.csv"}, true},
		{c, Need{Path: "/data/in/sub/../a.csv"}, true},
		{c, Need{Path: "/data/in/../secret.env"}, false},
		{c, Need{Path: "/data/input.csv"}, false}, // a sibling sharing the prefix
		{c, Need{Path: "data/in/a.csv"}, false},
	} {
		err := Permits(tc.c, tc.n)
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, ErrNotPermitted)) {
			t.Errorf("Permits(%+v, %s) = %v, want allowed %v", tc.c, tc.n, err, tc.want)
		}
	}
}

// TestOpenSourceStaysInsideItsDirectories: neither .. nor a symlink leads
// a path: source out of source_dirs.
func TestOpenSourceStaysInsideItsDirectories(t *testing.T) {
	root := t.TempDir()
	in, out := filepath.Join(root, "in"), filepath.Join(root, "out")
	for _, d := range []string{in, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(in, "ok.csv"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "secret.env"), []byte("AUTH_SECRET=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(out, "secret.env"), filepath.Join(in, "link.csv")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(in, "dir")); err != nil {
		t.Fatal(err)
	}
	f, err := OpenSource(filepath.Join(in, "ok.csv"), []string{in})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, p := range []string{
		filepath.Join(in, "..", "out", "secret.env"),
		filepath.Join(in, "link.csv"),
		filepath.Join(in, "dir", "secret.env"),
		filepath.Join(out, "secret.env"),
	} {
		if f, err := OpenSource(p, []string{in}); err == nil {
			f.Close()
			t.Errorf("OpenSource(%s) opened a file outside %s", p, in)
		} else if !errors.Is(err, ErrNotPermitted) {
			t.Errorf("OpenSource(%s): %v, want ErrNotPermitted", p, err)
		}
	}
	if f, err := OpenSource(filepath.Join(in, "ok.csv"), nil); err == nil {
		f.Close()
		t.Error("OpenSource with no source_dirs opened a file")
	}
}

// TestExecPolicyResolve: the worker's own check resolves a bare name in
// its PATH and wants the result listed; an upload is checked by the sum
// of the bytes received.
func TestExecPolicyResolve(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "op")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := DefaultExecPolicy()
	if _, err := p.Resolve(prog, ""); !errors.Is(err, ErrNotPermitted) {
		t.Fatalf("exec off: %v", err)
	}
	p.Enabled, p.Programs, p.Path, p.ProgramSums = true, []string{prog}, dir, []string{sumOf([]byte("up"))}
	if got, err := p.Resolve("op", ""); err != nil || got != prog {
		t.Fatalf("Resolve(op) = %q, %v", got, err)
	}
	if _, err := p.Resolve(filepath.Join(dir, "other"), ""); !errors.Is(err, ErrNotPermitted) {
		t.Fatalf("unlisted program: %v", err)
	}
	if _, err := p.Resolve("./up.sh", sumOf([]byte("up"))); err != nil {
		t.Fatalf("listed upload: %v", err)
	}
	if _, err := p.Resolve("./up.sh", sumOf([]byte("changed"))); !errors.Is(err, ErrNotPermitted) {
		t.Fatalf("unlisted upload: %v", err)
	}
	bad := ExecPolicy{Enabled: true, Programs: []string{"awk"}, Env: []string{"AUTH_SECRET"}, Cgroup: "maybe"}
	if probs := strings.Join(bad.Check(), "; "); !strings.Contains(probs, "absolute") || !strings.Contains(probs, "AUTH_SECRET") || !strings.Contains(probs, "cgroup") {
		t.Fatalf("Check: %s", probs)
	}
}

// TestSourceRecordsItsFileBeforeReading: a source given its input's
// identity checkpoints it before it reads a record, and every later
// checkpoint carries it.
func TestSourceRecordsItsFileBeforeReading(t *testing.T) {
	p, err := Compile(&Spec{Source: Source{Path: "/in", Format: FormatLines}, Stages: []Stage{{Name: "c", Op: OpCount, Key: "line"}}}, []string{"line"})
	if err != nil {
		t.Fatal(err)
	}
	id := &wire.RainstormFileID{Size: 4, SHA256: []byte{1, 2, 3}}
	src, _ := NewSourceMachine(SourceConfig{Downstream: 1, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 1, File: id}, nil)
	if _, want := src.Want(); want {
		t.Fatal("the source reads before its input's identity is durable")
	}
	c := src.Ready().Checkpoint
	if c == nil || c.Source == nil || c.Source.File != id || c.Version != 1 {
		t.Fatalf("first checkpoint %+v, want version 1 recording the file", c)
	}
	src.CheckpointResult(&wire.RainstormCheckpointAck{Version: 1, Incarnation: 1})
	if _, want := src.Want(); !want {
		t.Fatal("the source does not read once its input's identity is durable")
	}
	rd, _ := NewReader(strings.NewReader("a\nb\nc\n"), ReaderOptions{Format: FormatLines})
	seg, _ := ReadSegment(rd, 0, 2)
	src.Segment(seg)
	src.Ack(&wire.RainstormBatchAck{From: wire.RainstormTask{Stage: 1}, UpTo: 1})
	for range DefaultCheckpointTicks + 1 {
		src.Tick()
	}
	c = src.Ready().Checkpoint
	if c == nil || c.Source.File != id {
		t.Fatalf("later checkpoint %+v does not carry the file", c)
	}
	// A replacement resumes from it without a new identity checkpoint.
	again, _ := NewSourceMachine(SourceConfig{Downstream: 1, Next: p.Stages[0], SegmentRecords: 2, Incarnation: 2, File: id}, c)
	if r := again.Ready(); r.Checkpoint != nil {
		t.Fatal("a resumed source checkpointed its identity again")
	}
	if err := SameFile("/in", c.Source.File, id); err != nil {
		t.Fatal(err)
	}
	other := &wire.RainstormFileID{Size: 4, SHA256: []byte{9}}
	if err := SameFile("/in", c.Source.File, other); err == nil || !strings.Contains(err.Error(), "not the file the pipeline started on") {
		t.Fatalf("SameFile on another file: %v", err)
	}
}

func TestIdentifyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(p, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id, err := IdentifyFile(context.Background(), f)
	if err != nil || id.Size != 6 || hex.EncodeToString(id.SHA256) != sumOf([]byte("hello\n")) {
		t.Fatalf("IdentifyFile = %+v, %v", id, err)
	}
	if b := make([]byte, 5); func() bool { n, _ := f.Read(b); return string(b[:n]) != "hello" }() {
		t.Fatal("the file was not put back at its start")
	}
	// A task stopped while it hashes its input stops reading.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := IdentifyFile(ctx, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("IdentifyFile with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestPermitRefusesAtTheJobFilesLine: where the parser knows what the
// workers allow (a manager's API), a pipeline none allows is refused at
// the line of the key that asks.
func TestPermitRefusesAtTheJobFilesLine(t *testing.T) {
	job := `name: j
workflows:
  - name: p
    type: rainstorm
    source: {path: /etc/tempest/secret.env, format: lines}
    stages:
      - {name: a, op: filter, matches: "."}
      - {name: b, op: exec, command: /usr/bin/perl}
`
	reg := Registry(ParseOptions{Permit: func(n Need) error {
		return Permits(&wire.Confinement{Exec: true, ExecPrograms: []string{"/usr/bin/awk"}, SourceDirs: []string{"/srv/in"}}, n)
	}})
	_, err := jobfile.Parse([]byte(job), "job.yaml", reg)
	var jfe *jobfile.Error
	if !errors.As(err, &jfe) {
		t.Fatalf("parse: %v, want problems", err)
	}
	lines := map[int]string{}
	for _, p := range jfe.Problems {
		lines[p.Line] = p.String()
	}
	if !strings.Contains(lines[5], "source_dirs") || !strings.Contains(lines[8], "not in exec.programs") {
		t.Fatalf("problems %v, want line 5 (path) and line 8 (exec)", jfe.Problems)
	}
	allow := Registry(ParseOptions{Permit: func(Need) error { return nil }})
	if _, err := jobfile.Parse([]byte(job), "job.yaml", allow); err != nil {
		t.Fatalf("parse with everything allowed: %v", err)
	}
}
