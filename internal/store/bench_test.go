package store

import (
	"fmt"
	"testing"
	"time"

	"tempest/wire"
)

// BenchmarkJobLifecycle writes what a manager writes over a job's life: the
// job with its workflows at intake, then each workflow's ASSIGNED, RUNNING
// and COMPLETED, each with the job's record, as the manager's update path
// does. It reports the bytes written to the jobs and workflows buckets.
func BenchmarkJobLifecycle(b *testing.B) {
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprintf("workflows=%d", n), func(b *testing.B) {
			s, err := Open(b.TempDir() + "/m.db")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var rev uint64
			var written, before int64
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("j%08d", i)
				j := &JobRecord{Status: wire.JobSubmitted, CreatedAt: time.Now().UnixNano(),
					Submission: wire.JobSubmission{JobID: id, Name: "bench"}}
				wfs := make([]*WorkflowRecord, n)
				for k := range n {
					spec := wire.WorkflowSpec{Name: fmt.Sprintf("sleep-%d", k), Type: "sleep", Cores: 1,
						Timeout: time.Minute, Params: []byte(`{"duration":"200ms"}`)}
					j.Submission.Workflows = append(j.Submission.Workflows, spec)
					wfs[k] = &WorkflowRecord{JobID: id, WorkflowID: fmt.Sprintf("%s-%d", id, k), Index: k, Spec: spec,
						Status: wire.WorkflowPending}
				}
				rev++
				j.Rev = rev
				for _, w := range wfs {
					rev++
					w.Rev = rev
				}
				a, w := recordBytes(b, j, wfs...)
				written, before = written+a, before+w
				if err := s.Put(j, wfs...); err != nil {
					b.Fatal(err)
				}
				for _, st := range []wire.WorkflowStatus{wire.WorkflowAssigned, wire.WorkflowRunning, wire.WorkflowCompleted} {
					for _, w := range wfs {
						rev++
						w.Rev, w.Status = rev, st
						rev++
						j.Rev = rev
						a, wh := recordBytes(b, j, w)
						written, before = written+a, before+wh
						if err := s.Put(j, w); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(written)/float64(b.N), "record-bytes/job")
			b.ReportMetric(float64(before)/float64(b.N), "specs-inside-bytes/job")
		})
	}
}

// recordBytes is what Put stores for job and wfs (the job as the store
// encodes it once its workflows are stored), and what it stored when job
// records kept their specs.
func recordBytes(b *testing.B, job *JobRecord, wfs ...*WorkflowRecord) (n, specsInside int64) {
	v, err := encodeJobApart(job)
	if err != nil {
		b.Fatal(err)
	}
	whole, err := encode(job.Rev, job)
	if err != nil {
		b.Fatal(err)
	}
	n, specsInside = int64(len(v)), int64(len(whole))
	for _, w := range wfs {
		v, err := encode(w.Rev, w)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(v))
		specsInside += int64(len(v))
	}
	return n, specsInside
}
