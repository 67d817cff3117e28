// Package jobfile parses job files (YAML, or JSON, which is valid YAML)
// into wire.JobSubmission, with every problem reported at once by line and
// field path:
//
//	smoke.yaml:7: workflows[0].vus: must be between 1 and 100000, got 0
//	smoke.yaml:9: workflows[0]: unknown key "duraton" (did you mean "duration"?)
//
// A job file looks like this:
//
//	name: smoke
//	timeout: 60s                  # default 1h
//	datacenters: 2                # or a list of names; absent: the gate decides
//	workflows:
//	  - name: get-root
//	    type: http
//	    cores: 1                  # default 1
//	    vus: 8
//	    duration: 5s              # or: iterations: 2000
//	    steps:
//	      - {name: root, method: GET, url: "http://127.0.0.1:8080/"}
//	  - {name: nap, type: sleep, cores: 1, duration: 3s}
//
// An http workflow may ship a CSV data file whose columns its steps use as
// {{data.column}}:
//
//	data: {file: users.csv, mode: sequential}   # or random, per_vu
//
// The file is read at parse time through the DataReader given with
// WithDataFiles, and its text travels inside the workflow's params, so
// workers need no file access. tempest submit parses on the client with
// DirDataFiles (names relative to the job file) and uploads the files it
// read with the job file; the API server parses again with MapDataFiles
// over those uploads and never reads its own disk. A job's data files may
// total workflow.MaxDataSize bytes.
//
// The keys every workflow has (name, type, cores, timeout, thresholds) are
// read here (thresholds through workflow.ParseThresholds, since the manager
// evaluates them whatever the type);
// the rest belong to the workflow's type, which reads them through
// workflow.Fields and encodes its params as CBOR into the spec (see package
// workflow for why). Unknown keys are errors everywhere, since a misspelt
// optional key would otherwise quietly become its default.
//
// The YAML is parsed with yaml.v3's Node API, which keeps line numbers, and
// converted to a plain workflow.Node tree. Input is treated as untrusted (the
// API takes job files from any client): at most 1 MiB, one document, nesting
// at most MaxDepth, and no anchors, aliases, merge keys or custom tags, so a
// "billion laughs" file is refused before anything is expanded.
package jobfile
