package jobs

import (
	"tempest/wire"
)

// CheckStoredSize refuses a job whose stored form, its encoded submission,
// is more than limit bytes (a node's max_job_bytes): every manager keeps it
// for the job's retention, so its size is what one submission costs each
// of their disks. The refusal is too_large, naming the setting.
func (j *Job) CheckStoredSize(limit int64) error {
	b, err := wire.Marshal((*wire.JobSubmission)(j))
	if err != nil {
		return wire.Errorf(wire.CodeMalformed, "job %q cannot be encoded: %v", j.Name, err)
	}
	if n := int64(len(b)); n > limit {
		return wire.Errorf(wire.CodeTooLarge, "job %q is %d bytes stored, more than the %d allowed (max_job_bytes): "+
			"name large inputs by file (data files, file: sources are uploaded as blobs) rather than writing them into the job", j.Name, n, limit)
	}
	return nil
}
