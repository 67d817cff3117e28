package api

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"tempest/internal/report"
	"tempest/workflow"
)

func TestServerConfigValidate(t *testing.T) {
	valid := func() ServerConfig {
		c := DefaultServerConfig()
		c.Token = "secret-token"
		c.Registry = workflow.DefaultRegistry()
		return c
	}
	tests := []struct {
		name   string
		change func(*ServerConfig)
		want   []string // fields named in the error; none means valid
	}{
		{"default plus token and registry", func(*ServerConfig) {}, nil},
		{"unlimited rate", func(c *ServerConfig) { c.RateLimit = math.Inf(1) }, nil},
		{"tls", func(c *ServerConfig) { c.TLSCertFile, c.TLSKeyFile = "c.pem", "k.pem" }, nil},
		{"zero value", func(c *ServerConfig) { *c = ServerConfig{} },
			[]string{"Listen", "Token", "MaxBodyBytes", "RateLimit", "RateBurst", "RequestTimeout", "StreamHeartbeat", "Registry"}},
		{"cert without key", func(c *ServerConfig) { c.TLSCertFile = "c.pem" }, []string{"TLSKeyFile"}},
		{"key without cert", func(c *ServerConfig) { c.TLSKeyFile = "k.pem" }, []string{"TLSCertFile"}},
		{"token with space", func(c *ServerConfig) { c.Token = "a b" }, []string{"Token"}},
		{"NaN rate", func(c *ServerConfig) { c.RateLimit = math.NaN() }, []string{"RateLimit"}},
		{"negative timeout", func(c *ServerConfig) { c.RequestTimeout = -time.Second }, []string{"RequestTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.change(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, field := range tt.want {
				if !strings.Contains(err.Error(), field+":") && !strings.Contains(err.Error(), field+",") {
					t.Errorf("error %q does not name %s", err, field)
				}
			}
		})
	}
}

func TestResultsCSV(t *testing.T) {
	res := &Results{JobID: "j", Workflows: []WorkflowStatus{
		{Name: "=cmd()", CompletedCount: 3, FailedCount: 1},
		{Name: "get", ElapsedSeconds: 4, Steps: []StepSummary{
			{Name: "a,b", Completed: 2, P50Ms: 0.1234, P95Ms: 1.5, P999Ms: 7.25, MaxMs: 9,
				Statuses: map[string]int64{"200": 2, "302": 2, "500": 5}, Errors: map[string]int64{"status": 5, "=x": 1}},
			{Name: "@x", Failed: 1, Checks: []CheckSummary{{Name: "ok", Passed: 3, Failed: 1}, {Name: "fast", Passed: 4}}},
		}},
	}}
	b, err := ResultsCSV(res)
	if err != nil {
		t.Fatal(err)
	}
	want := "workflow,step,completed,failed,p50_ms,p90_ms,p99_ms,max_ms,checks_passed,checks_failed,checks," +
		"rps,p95_ms,p999_ms,statuses,errors\n" +
		"'=cmd(),,3,1,,,,,,,,,,,,\n" +
		"get,\"a,b\",2,0,0.123,0.000,0.000,9.000,0,0,,0.5,1.500,7.250,500=5; 200=2; 302=2,status=5; =x=1\n" +
		"get,'@x,0,1,0.000,0.000,0.000,0.000,7,1,ok=3/1; fast=4/0,0.2,0.000,0.000,,\n"
	if string(b) != want {
		t.Errorf("csv:\n%s\nwant:\n%s", b, want)
	}
}

func TestRequestHelpers(t *testing.T) {
	for _, tt := range []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"text/event-stream"}, false},
		{[]string{"application/x-ndjson"}, true},
		{[]string{"application/json, application/x-ndjson;q=0.9"}, true},
		{[]string{"text/plain", "application/jsonl"}, true},
		{[]string{"garbage;;;"}, false},
	} {
		if got := acceptsNDJSON(tt.accept); got != tt.want {
			t.Errorf("acceptsNDJSON(%q) = %v", tt.accept, got)
		}
	}
	for in, want := range map[string]string{
		"":                       "job file",
		"smoke.yaml":             "smoke.yaml",
		"/home/me/x.yaml":        "x.yaml",
		`C:\jobs\x.yaml`:         "x.yaml",
		"a\nb.yaml":              "ab.yaml",
		"../":                    "..",
		strings.Repeat("é", 100): strings.Repeat("é", 64),
	} {
		if got := jobFilename(in); got != want {
			t.Errorf("jobFilename(%q) = %q, want %q", in, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2"} {
		if got := retryAfterHeader(d); got != want {
			t.Errorf("retryAfterHeader(%s) = %s, want %s", d, got, want)
		}
	}
}

// TestReportPipeline: the report sums a pipeline's tasks by stage (a
// restart is an attempt past the first) and shows the head of its output
// while saying how many rows there are.
func TestReportPipeline(t *testing.T) {
	out := &PipelineOutput{Header: []string{"key", "value"}, Complete: true,
		Rows: [][]string{{"a", "1"}, {"b", "2"}, {"c", "3"}},
		Tasks: []PipelineTask{
			{Stage: 0, Name: "source", Attempts: 1, Records: 10, RecordsOut: 9, Bad: 1},
			{Stage: 1, Index: 0, Name: "count", Attempts: 2, Records: 4, RecordsOut: 2},
			{Stage: 1, Index: 1, Name: "count", Attempts: 1, Records: 5, RecordsOut: 1},
		}}
	stages, o := reportPipeline(&reportedOutput{PipelineOutput: out, total: len(out.Rows)}, 2)
	want := []report.Stage{{Name: "source", Tasks: 1, Records: 10, RecordsOut: 9, Bad: 1},
		{Name: "count", Tasks: 2, Records: 9, RecordsOut: 3, Restarts: 1}}
	if !reflect.DeepEqual(stages, want) {
		t.Errorf("stages = %+v, want %+v", stages, want)
	}
	if o.Total != 3 || len(o.Rows) != 2 || !o.Complete || o.Header[0] != "key" {
		t.Errorf("output = %+v", o)
	}
}
