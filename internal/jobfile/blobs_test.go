package jobfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"tempest/workflow"
)

// A data file uploaded as a blob is checked in full at parse time, then
// only its name stays in the params of every shard; a blob whose content
// does not match its name is a problem at the data file's line.
func TestDataFileAsBlob(t *testing.T) {
	csv := "username,password\nalice,pw1\nbob,pw2\n"
	h := sha256.Sum256([]byte(csv))
	sum := hex.EncodeToString(h[:])
	job := fmt.Sprintf(dataJob, "{file: users.csv}", `"{{data.password}}"`)
	job = strings.Replace(job, "    vus: 2\n", "    vus: 2\n    shards: 2\n", 1)
	read := WithDataFiles(MapDataFiles(map[string][]byte{"users.csv": []byte(csv)}))
	reg := workflow.DefaultRegistry()
	sub, err := Parse([]byte(job), "job.yaml", reg, read, WithDataBlobs(map[string]string{"users.csv": sum}))
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.Workflows) != 2 {
		t.Fatalf("%d specs, want 2 shards", len(sub.Workflows))
	}
	for _, spec := range sub.Workflows {
		p, err := workflow.HTTPType{}.DecodeParams(spec.Params)
		if err != nil {
			t.Fatal(err)
		}
		d := p.(*workflow.HTTPParams).Data
		if d.Blob != sum || d.CSV != "" || d.File != "users.csv" {
			t.Fatalf("shard %d data = %+v, want the blob's name and no text", spec.Shard, d)
		}
		// The worker's side: attaching the content gives runnable params.
		attached, err := reg.AttachSpecBlobs(spec, func(string) ([]byte, error) { return []byte(csv), nil })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.New(attached); err != nil {
			t.Fatalf("attached params do not run: %v", err)
		}
		if _, err := reg.AttachSpecBlobs(spec, func(string) ([]byte, error) { return []byte(csv + "eve,x\n"), nil }); err == nil {
			t.Fatal("attaching content that does not match the blob's name succeeded")
		}
	}
	// Without the text the parser still checks a column a step names: the
	// text is read through the DataReader.
	bad := fmt.Sprintf(dataJob, "{file: users.csv}", `"{{data.pasword}}"`)
	if _, err := Parse([]byte(bad), "job.yaml", reg, read, WithDataBlobs(map[string]string{"users.csv": sum})); err == nil ||
		!strings.Contains(err.Error(), "pasword") {
		t.Fatalf("unknown column with a blob: %v", err)
	}
	other := sha256.Sum256([]byte("something else"))
	_, err = Parse([]byte(job), "job.yaml", reg, read, WithDataBlobs(map[string]string{"users.csv": hex.EncodeToString(other[:])}))
	if err == nil || !strings.Contains(err.Error(), "does not match its blob") || !strings.Contains(err.Error(), "job.yaml:8") {
		t.Fatalf("mismatching blob: %v", err)
	}
}
