package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/wire"
)

// execJob is a pipeline of a generate source, an exec stage running
// program over tasks tasks, and a count.
func execJob(t *testing.T, program string, tasks int) *wire.JobSubmission {
	t.Helper()
	return expandJob(t, "rs-exec", "pipe", &rainstorm.PipelineParams{Spec: rainstorm.Spec{
		Source: rainstorm.Source{Generate: &rainstorm.Generate{Records: 10, Keys: 2}},
		Stages: []rainstorm.Stage{
			{Name: "op", Op: rainstorm.OpExec, Tasks: tasks, Command: []string{program}},
			{Name: "count", Op: rainstorm.OpCount, Tasks: 1, Key: "1"},
		},
	}})
}

// TestExecPipelineRefusedWhereNoWorkerAllowsIt: with exec off on every
// worker, a pipeline with an exec stage is refused at submit, naming the
// stage's key; once a worker allows the program, the pipeline runs and
// its exec tasks are placed only there.
func TestExecPipelineRefusedWhereNoWorkerAllowsIt(t *testing.T) {
	c := newRainstormCluster(t, nil)
	defer c.close()
	lead := c.leader()
	c.addWorker("w-plain", 8)

	_, err := lead.Submit(context.Background(), execJob(t, "/usr/bin/awk", 3))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeRejected || !strings.Contains(we.Message, "stages[0].command") ||
		!strings.Contains(we.Message, "exec is off") {
		t.Fatalf("submit with exec off everywhere: %v, want a refusal naming stages[0].command", err)
	}
	// The API's parse hook says the same, for the job file's line.
	if err := lead.RainstormParseOptions().Permit(rainstorm.Need{Program: "/usr/bin/awk"}); err == nil {
		t.Fatal("the parse hook allowed exec no worker allows")
	}

	c.addConfinedWorker("w-exec", 3, &wire.Confinement{Exec: true, ExecPrograms: []string{"/usr/bin/awk"}})
	knows(t, lead, rainstorm.Need{Program: "/usr/bin/awk"})
	_, err = lead.Submit(context.Background(), execJob(t, "/usr/bin/other", 1))
	if !errors.As(err, &we) || !strings.Contains(we.Message, "not in exec.programs") {
		t.Fatalf("submit with an unlisted program: %v", err)
	}
	ack, err := lead.Submit(context.Background(), execJob(t, "/usr/bin/awk", 3))
	if err != nil || !ack.Accepted {
		t.Fatalf("submit with the program allowed: %v %+v", err, ack)
	}
	for k := 1; k <= 3; k++ { // the exec stage's tasks
		taskToken(t, lead, ack.JobID, k, 0)
		_, _, infos := lead.rsTasks(ack.JobID, "pipe")
		if infos[k].worker != "w-exec" {
			t.Fatalf("exec task %d placed on %s, which does not allow it", k, infos[k].worker)
		}
	}
}

// TestPathSourceRefusedOutsideSourceDirs: a path: source is refused at
// submit unless a worker lists a directory holding it.
func TestPathSourceRefusedOutsideSourceDirs(t *testing.T) {
	c := newRainstormCluster(t, nil)
	defer c.close()
	lead := c.leader()
	c.addConfinedWorker("w-data", 4, &wire.Confinement{SourceDirs: []string{"/data/in"}})
	knows(t, lead, rainstorm.Need{Path: "/data/in/a.txt"})
	job := func(path string) *wire.JobSubmission {
		spec := rainstorm.Spec{Source: rainstorm.Source{Path: path, Format: rainstorm.FormatLines},
			Stages: []rainstorm.Stage{{Name: "count", Op: rainstorm.OpCount, Tasks: 1, Key: "line"}}}
		b, _ := wire.Marshal(&rainstorm.PipelineParams{Spec: spec})
		parts, err := rainstorm.Type{}.Expand(b)
		if err != nil {
			t.Fatal(err)
		}
		sub := &wire.JobSubmission{Name: "rs-path"}
		for i, p := range parts {
			sub.Workflows = append(sub.Workflows, wire.WorkflowSpec{Name: "pipe", Type: rainstorm.TypeName, Cores: 1, Params: p, Shard: i + 1, Shards: len(parts)})
		}
		return sub
	}
	_, err := lead.Submit(context.Background(), job("/data/in/../../etc/tempest/secret.env"))
	var we *wire.Error
	if !errors.As(err, &we) || !strings.Contains(we.Message, "source.path") || !strings.Contains(we.Message, "source_dirs") {
		t.Fatalf("submit of a path outside source_dirs: %v", err)
	}
	if ack, err := lead.Submit(context.Background(), job("/data/in/a.txt")); err != nil || !ack.Accepted {
		t.Fatalf("submit of a path inside source_dirs: %v", err)
	}
}

// knows waits until m has heard (directly or relayed) of a worker that
// allows n: a worker may register with a follower first.
func knows(t *testing.T, m *Manager, n rainstorm.Need) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error { return m.workers.permits(n) })
}
