package api_test

import (
	"bytes"
	"context"
	"errors"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/workflow"
)

const dataJobFile = `name: logins
workflows:
  - name: login
    type: http
    iterations: 4
    data: {file: data/users.csv, mode: random}
    steps:
      - {name: login, url: "http://127.0.0.1:1/login?u={{data.username}}"}
`

const usersCSV = "username\nalice\nbob\n"

// TestSubmitWithDataFiles sends a job file with its data file the way the
// CLI does, and checks that the CSV reached the submission's params under
// the name the job file uses, directory included.
func TestSubmitWithDataFiles(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c, err := api.NewClient([]string{srv.URL()}, apitest.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.SubmitWithData(ctx, []byte(dataJobFile), "jobs/logins.yaml",
		map[string][]byte{"data/users.csv": []byte(usersCSV)}); err != nil {
		t.Fatal(err)
	}
	subs := b.Submissions()
	if len(subs) != 1 {
		t.Fatalf("%d submissions", len(subs))
	}
	p, err := workflow.HTTPType{}.DecodeParams(subs[0].Workflows[0].Params)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.(*workflow.HTTPParams).Data; d == nil || d.File != "data/users.csv" || d.CSV != usersCSV || d.Mode != workflow.DataRandom {
		t.Fatalf("data %+v", d)
	}

	// Without the file, the problem names the job file's line.
	_, err = c.Submit(ctx, []byte(dataJobFile), "jobs/logins.yaml")
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || len(apiErr.Problems) != 1 || apiErr.Problems[0].Line != 6 ||
		apiErr.Problems[0].Path != "workflows[0].data.file" || !strings.Contains(apiErr.Problems[0].Message, "not sent with the job file") {
		t.Fatalf("submit without the data file: %v (%+v)", err, apiErr)
	}
}

func TestSubmitMalformedBundles(t *testing.T) {
	srv := apitest.Serve(t, apitest.NewBackend(), nil)
	raw := newRawClient(t)
	bundle := func(parts ...[3]string) ([]byte, string) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, p := range parts {
			w, err := mw.CreateFormFile(p[0], p[1])
			if err != nil {
				t.Fatal(err)
			}
			w.Write([]byte(p[2]))
		}
		mw.Close()
		return body.Bytes(), mw.FormDataContentType()
	}
	job := [3]string{api.FormJobFile, "job.yaml", dataJobFile}
	data := [3]string{api.FormDataFile, "data/users.csv", usersCSV}
	cases := []struct {
		name  string
		parts [][3]string
		want  string
	}{
		{"no job file", [][3]string{data}, `malformed submission: no "job" part holding the job file`},
		{"two job files", [][3]string{job, job, data}, `malformed submission: more than one "job" part`},
		{"data file twice", [][3]string{job, data, data}, `malformed submission: data file "data/users.csv" sent twice`},
		{"unknown part", [][3]string{job, {"extra", "x", "y"}}, `malformed submission: unknown part "extra" (want "job" and "data")`},
		{"data without a name", [][3]string{job, {api.FormDataFile, "", "y"}}, `malformed submission: a "data" part without a filename`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := bundle(tc.parts...)
			resp, answer := raw.do("POST", srv.URL()+"/v1/jobs", body, map[string]string{"Content-Type": ct})
			if e := decodeErrorBody(t, answer); resp.StatusCode != http.StatusBadRequest || e.Code != api.CodeMalformed || e.Error != tc.want {
				t.Fatalf("%d %+v, want 400 %q", resp.StatusCode, e, tc.want)
			}
		})
	}
	body, ct := bundle(job, data)
	if resp, answer := raw.do("POST", srv.URL()+"/v1/jobs", body, map[string]string{"Content-Type": ct}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a good bundle: %d %s", resp.StatusCode, answer)
	}
}
