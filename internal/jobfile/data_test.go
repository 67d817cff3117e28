package jobfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"tempest/workflow"
)

// dataJob is a job file with a data file; %s are the data mapping and the
// login step's body.
const dataJob = `name: logins
workflows:
  - name: login
    type: http
    vus: 2
    duration: 30s
    data: %s
    steps:
      - name: login
        method: POST
        url: "http://127.0.0.1:8080/login?user={{data.username}}"
        body: %s
`

// dataDir writes files into a fresh directory and returns it.
func dataDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const usersCSV = "username,password\nalice,a1\nbob,b2\n"

func TestParseDataFile(t *testing.T) {
	dir := dataDir(t, map[string]string{"data/users.csv": usersCSV})
	src := fmt.Sprintf(dataJob, "{file: data/users.csv, mode: per_vu}", `'{"password": "{{data.password}}"}'`)
	sub, err := Parse([]byte(src), "smoke.yaml", workflow.DefaultRegistry(), WithDataFiles(DirDataFiles(dir)))
	if err != nil {
		t.Fatal(err)
	}
	spec := sub.Workflows[0]
	p := decodeParams(t, spec).(*workflow.HTTPParams)
	want := &workflow.HTTPData{File: "data/users.csv", Mode: workflow.DataPerVU, CSV: usersCSV}
	if !reflect.DeepEqual(p.Data, want) {
		t.Fatalf("data %+v, want %+v", p.Data, want)
	}
	if spec.Planned != 30*time.Second {
		t.Errorf("planned %s, want the 30s duration", spec.Planned)
	}
	// The default mode is sequential, and the rows run once a worker has
	// the params: a runner builds from them with no file access.
	src = fmt.Sprintf(dataJob, "{file: data/users.csv}", `"{{data.password}}"`)
	sub, err = Parse([]byte(src), "smoke.yaml", workflow.DefaultRegistry(), WithDataFiles(DirDataFiles(dir)))
	if err != nil {
		t.Fatal(err)
	}
	if p := decodeParams(t, sub.Workflows[0]).(*workflow.HTTPParams); p.Data.Mode != workflow.DataSequential {
		t.Errorf("default mode %s", p.Data.Mode)
	}
	if _, err := workflow.DefaultRegistry().New(sub.Workflows[0]); err != nil {
		t.Fatalf("a worker cannot build the workflow: %v", err)
	}
	// The API server's reader serves the same names from uploaded files.
	uploaded := MapDataFiles(map[string][]byte{"data/users.csv": []byte(usersCSV)})
	if _, err := Parse([]byte(src), "smoke.yaml", workflow.DefaultRegistry(), WithDataFiles(uploaded)); err != nil {
		t.Fatalf("from uploaded files: %v", err)
	}
}

func TestParseDataFileErrors(t *testing.T) {
	const body = `"{{data.password}}"`
	dir := dataDir(t, map[string]string{
		"users.csv":  usersCSV,
		"empty.csv":  "",
		"header.csv": "username,password\n",
		"dup.csv":    "username,password,username\na,b,c\n",
		"short.csv":  "username,password\nalice,a1\nbob\n",
		"binary.csv": "username,password\n\xff\xfe,x\n",
		"big.csv":    "username,password\n" + strings.Repeat("a,b\n", workflow.MaxDataSize/4),
		"half.csv":   "username,password\n" + strings.Repeat("a,b\n", workflow.MaxDataSize/8+1),
		"sub/x.csv":  usersCSV,
	})
	cases := []struct {
		name string
		data string // the data mapping
		body string // the step's body; default: body
		src  string // the whole file, instead of dataJob
		read workflow.DataReader
		want []string
	}{
		{name: "missing file", data: "{file: nope.csv}",
			want: []string{fmt.Sprintf("smoke.yaml:7: workflows[0].data.file: cannot read data file: open %s: no such file or directory", filepath.Join(dir, "nope.csv"))}},
		{name: "a directory", data: "{file: sub}",
			want: []string{fmt.Sprintf("smoke.yaml:7: workflows[0].data.file: cannot read data file: %s is a directory", filepath.Join(dir, "sub"))}},
		{name: "too large", data: "{file: big.csv}",
			want: []string{fmt.Sprintf(`smoke.yaml:7: workflows[0].data.file: data file "big.csv" is %d bytes, more than the %d allowed`, workflow.MaxDataSize+1, workflow.MaxDataSize)}},
		{name: "empty", data: "{file: empty.csv}",
			want: []string{`smoke.yaml:7: workflows[0].data.file: data file "empty.csv" is empty; want a header row naming the columns, then rows`}},
		{name: "no rows", data: "{file: header.csv}",
			want: []string{`smoke.yaml:7: workflows[0].data.file: data file "header.csv" has a header row but no rows`}},
		{name: "duplicate column", data: "{file: dup.csv}",
			want: []string{`smoke.yaml:7: workflows[0].data.file: data file "dup.csv" line 1: duplicate column "username" (columns 1 and 3)`}},
		{name: "bad csv", data: "{file: short.csv}",
			want: []string{`smoke.yaml:7: workflows[0].data.file: data file "short.csv" line 3: wrong number of fields`}},
		{name: "not UTF-8", data: "{file: binary.csv}",
			want: []string{`smoke.yaml:7: workflows[0].data.file: data file "binary.csv" is not UTF-8 text`}},
		{name: "unknown column", data: "{file: users.csv}", body: `"{{data.pasword}}"`,
			want: []string{`smoke.yaml:12: workflows[0].steps[0].body: {{data.pasword}}: data file "users.csv" has no column "pasword" (columns: username, password)`}},
		{name: "no data file for a reference", data: "~",
			want: []string{
				"smoke.yaml:11: workflows[0].steps[0].url: {{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow",
				"smoke.yaml:12: workflows[0].steps[0].body: {{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow",
			}},
		{name: "bad mode", data: "{file: users.csv, mode: shuffled}",
			want: []string{`smoke.yaml:7: workflows[0].data.mode: must be sequential, random or per_vu, got "shuffled"`}},
		{name: "no file key", data: "{mode: random, fil: users.csv}",
			want: []string{
				"smoke.yaml:7: workflows[0].data.file: is required",
				`smoke.yaml:7: workflows[0].data: unknown key "fil" (did you mean "file"?)`,
			}},
		{name: "not a mapping", data: "users.csv",
			want: []string{`smoke.yaml:7: workflows[0].data: must be a mapping, got "users.csv"`}},
		{name: "no reader (the API got no files)", data: "{file: users.csv}", read: MapDataFiles(nil),
			want: []string{"smoke.yaml:7: workflows[0].data.file: cannot read data file: open users.csv: " + ErrDataFileNotSent.Error()}},
		{name: "parser without data files", data: "{file: users.csv}", read: func(string) ([]byte, error) { return nil, errors.New("unused") },
			want: []string{"smoke.yaml:7: workflows[0].data.file: cannot read data file: unused"}},
		{name: "the job's data files together too large", src: `name: two
workflows:
  - name: a
    type: http
    iterations: 1
    data: {file: half.csv}
    steps: [{name: s, url: "http://x/{{data.username}}"}]
  - name: b
    type: http
    iterations: 1
    data: {file: half.csv}
    steps: [{name: s, url: "http://x/{{data.username}}"}]
`, want: []string{fmt.Sprintf(`smoke.yaml:11: workflows[1].data.file: data file "half.csv" is %d bytes, which with the job file's other data files (%[1]d bytes) is more than the %d allowed`,
			len("username,password\n")+4*(workflow.MaxDataSize/8+1), workflow.MaxDataSize)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if src == "" {
				b := tc.body
				if b == "" {
					b = body
				}
				src = fmt.Sprintf(dataJob, tc.data, b)
			}
			read := tc.read
			if read == nil {
				read = DirDataFiles(dir)
			}
			_, err := Parse([]byte(src), "smoke.yaml", workflow.DefaultRegistry(), WithDataFiles(read))
			var jerr *Error
			if !errors.As(err, &jerr) {
				t.Fatalf("error %v (%T) is not *jobfile.Error", err, err)
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
	// Without WithDataFiles a job file cannot name one.
	_, err := parse(t, fmt.Sprintf(dataJob, "{file: users.csv}", body))
	if err == nil || err.Error() != `smoke.yaml:7: workflows[0].data.file: data file "users.csv" cannot be read here: data files are read where the job file is parsed` {
		t.Fatalf("without a reader: %v", err)
	}
}

// TestExamplesParse keeps examples/ honest: every job file there parses,
// data files included, as tempest submit would read them.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "rainstorm-") {
			continue // pipelines name big inputs kept elsewhere: rainstorm's TestExampleJobFiles parses them
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Every {{env.NAME}} an example names is a base URL, and every
		// secret anything.
		env := WithEnv(func(string) (string, bool) { return "http://127.0.0.1:8080", true })
		secrets := WithSecrets(func(string) (string, bool) { return "example", true })
		if _, err := Parse(src, f, workflow.DefaultRegistry(), WithDataFiles(DirDataFiles(filepath.Dir(f))), env, secrets); err != nil {
			t.Errorf("%v", err)
		}
	}
}
