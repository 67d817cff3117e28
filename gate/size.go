package gate

import (
	"fmt"
	"slices"

	"tempest/wire"
)

// maxRecordBytes bounds one job record on the wire, whatever carries it (a
// replicated record, a sync page, a record lookup's answer): the message
// cap less room for the envelope and the carrying message's other fields.
const maxRecordBytes = wire.MaxMessageSize - 64<<10

// fitRecord returns rec, or a lighter copy of it, encoded within
// maxRecordBytes. A record grows with its datacenters' reports, and a job
// over several datacenters can outgrow one message though each report fit
// one; a gate that could not send it would stall every state sync that
// reaches it. What a successor needs to neither lose nor repeat the job is
// the submission, the leases and each datacenter's status and counts, so
// the copy sheds, in turn, the per-second series (charts) and then the step
// histograms; the datacenters' next reports bring them back for running
// jobs. A record too large even then (its submission alone) is a too_large
// error naming the job. shed says what was left out ("" when nothing).
func fitRecord(rec *wire.GateJobRecord) (out *wire.GateJobRecord, encoded []byte, shed string, err error) {
	b, err := wire.Marshal(rec)
	if err != nil {
		return nil, nil, "", fmt.Errorf("encode job %s: %w", rec.Submission.JobID, err)
	}
	if len(b) <= maxRecordBytes {
		return rec, b, "", nil
	}
	for _, step := range []struct {
		what string
		drop func(w *wire.WorkflowProgress)
	}{
		{"series", func(w *wire.WorkflowProgress) { w.Series = nil }},
		{"series and step histograms", func(w *wire.WorkflowProgress) { w.Series, w.StepStats = nil, nil }},
	} {
		cp := *rec
		cp.Datacenters = slices.Clone(rec.Datacenters)
		for i := range cp.Datacenters {
			cp.Datacenters[i].Workflows = slices.Clone(cp.Datacenters[i].Workflows)
			for k := range cp.Datacenters[i].Workflows {
				step.drop(&cp.Datacenters[i].Workflows[k])
			}
		}
		if b, err = wire.Marshal(&cp); err != nil {
			return nil, nil, "", fmt.Errorf("encode job %s: %w", rec.Submission.JobID, err)
		}
		if len(b) <= maxRecordBytes {
			return &cp, b, step.what, nil
		}
	}
	return nil, nil, "", wire.Errorf(wire.CodeTooLarge, "job %s: record of %d bytes does not fit a message (at most %d) even without series and histograms",
		rec.Submission.JobID, len(b), maxRecordBytes)
}
