package workflow

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestParseDataCSV(t *testing.T) {
	cases := []struct {
		name    string
		text    string
		columns []string
		rows    [][]string
		wantErr string
	}{
		{name: "plain", text: "user,pass\nalice,a1\nbob,b2\n",
			columns: []string{"user", "pass"}, rows: [][]string{{"alice", "a1"}, {"bob", "b2"}}},
		{name: "no final newline, CRLF", text: "user,pass\r\nalice,a1\r\nbob,b2",
			columns: []string{"user", "pass"}, rows: [][]string{{"alice", "a1"}, {"bob", "b2"}}},
		{name: "byte-order mark", text: "\uFEFFid\n7\n", columns: []string{"id"}, rows: [][]string{{"7"}}},
		{name: "quoted commas and line breaks", text: "a,b\n\"x, y\",\"two\nlines\"\n",
			columns: []string{"a", "b"}, rows: [][]string{{"x, y", "two\nlines"}}},
		{name: "empty", text: "", wantErr: "is empty; want a header row naming the columns, then rows"},
		{name: "header only", text: "user,pass\n", wantErr: "has a header row but no rows"},
		{name: "duplicate column", text: "user,pass,user\na,b,c\n", wantErr: `line 1: duplicate column "user" (columns 1 and 3)`},
		{name: "unnamed column", text: "user,,pass\na,b,c\n", wantErr: "line 1: column 2 has no name"},
		{name: "column with a space", text: "first name\nalice\n", wantErr: `line 1: column name "first name" has spaces or braces`},
		{name: "short row", text: "user,pass\nalice,a1\nbob\n", wantErr: "line 3: wrong number of fields"},
		{name: "bare quote", text: "user\nal\"ice\n", wantErr: `line 2, column 3: bare " in non-quoted-field`},
		{name: "not UTF-8", text: "user\n\xff\n", wantErr: "is not UTF-8 text"},
		{name: "too large", text: strings.Repeat("x", MaxDataSize+1), wantErr: fmt.Sprintf("more than the %d allowed", MaxDataSize)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			table, err := parseDataCSV("users.csv", tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(table.columns, tc.columns) || !reflect.DeepEqual(table.rows, tc.rows) {
				t.Fatalf("columns %q rows %q, want %q %q", table.columns, table.rows, tc.columns, tc.rows)
			}
		})
	}
}

func TestDataTemplates(t *testing.T) {
	table, err := parseDataCSV("users.csv", "username,password\nalice,s3cret\n")
	if err != nil {
		t.Fatal(err)
	}
	data := &HTTPData{File: "users.csv", CSV: "username,password\nalice,s3cret\n"}
	cases := []struct {
		src     string
		data    *HTTPData
		table   *dataTable
		row     []string
		want    string
		wantErr string
	}{
		{src: `{"u":"{{data.username}}","p":"{{ data.password }}"}`, data: data, table: table,
			row: []string{"bob", "hunter2"}, want: `{"u":"bob","p":"hunter2"}`},
		{src: "/u/{{data.username}}/{{vu}}", data: data, table: table, row: []string{"carol", "x"}, want: "/u/carol/1"},
		{src: "{{data.pasword}}", data: data, table: table,
			wantErr: `{{data.pasword}}: data file "users.csv" has no column "pasword" (columns: username, password)`},
		{src: "{{data.username}}", wantErr: "{{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow"},
		// The data file has a problem of its own: references wait for it.
		{src: "{{data.anything}}", data: data, want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			tmpl, err := parseTemplate(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			err = tmpl.checkData(tc.data, tc.table)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.table == nil {
				return // unbound: nothing to render
			}
			if got := tmpl.render(tmplVars{vu: 1, row: tc.row}); got != tc.want {
				t.Fatalf("rendered %q, want %q", got, tc.want)
			}
			if got := tmpl.sample(); !strings.Contains(got, "alice") {
				t.Fatalf("sample %q does not use the first row", got)
			}
		})
	}
	for src, want := range map[string]string{
		"{{data.}}":        "{{data.}} needs a column name",
		"{{data.user 1}}":  "{{data.user}} takes no arguments, got 1",
		"{{ data.a b c }}": "{{data.a}} takes no arguments, got 2",
	} {
		if _, err := parseTemplate(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", src, err, want)
		}
	}
}

func TestDataRowsModes(t *testing.T) {
	table, err := parseDataCSV("ids.csv", "id\n0\n1\n2\n3\n4\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("sequential shares one counter across VUs", func(t *testing.T) {
		d := &dataRows{table: table, mode: DataSequential}
		const vus, perVU = 8, 50 // 400 rows handed out: each of the 5 exactly 80 times
		counts := make([]map[string]int, vus)
		var wg sync.WaitGroup
		for vu := range vus {
			counts[vu] = map[string]int{}
			wg.Go(func() {
				for range perVU {
					counts[vu][d.row(vu)[0]]++
				}
			})
		}
		wg.Wait()
		total := map[string]int{}
		for _, c := range counts {
			for id, n := range c {
				total[id] += n
			}
		}
		if want := map[string]int{"0": 80, "1": 80, "2": 80, "3": 80, "4": 80}; !reflect.DeepEqual(total, want) {
			t.Fatalf("rows handed out %v, want %v", total, want)
		}
	})
	t.Run("per_vu", func(t *testing.T) {
		d := &dataRows{table: table, mode: DataPerVU}
		for vu, want := range []string{"0", "1", "2", "3", "4", "0", "1"} {
			for range 3 {
				if got := d.row(vu)[0]; got != want {
					t.Fatalf("VU %d got row %s, want %s every time", vu+1, got, want)
				}
			}
		}
	})
	t.Run("random", func(t *testing.T) {
		d := &dataRows{table: table, mode: DataRandom}
		seen := map[string]bool{}
		// The chance that 2000 draws miss one of 5 rows is about 5·0.8^2000.
		for range 2000 {
			seen[d.row(0)[0]] = true
		}
		if len(seen) != 5 {
			t.Fatalf("2000 random draws saw rows %v", seen)
		}
	})
	if (*dataRows)(nil).row(3) != nil {
		t.Fatal("no data file must give no row")
	}
}

func TestHTTPParamsValidateData(t *testing.T) {
	csv := "username,password\nalice,a1\nbob,b2\n"
	withData := func(mut func(p *HTTPParams)) HTTPParams {
		p := HTTPParams{VUs: 1, Iterations: 1, Data: &HTTPData{File: "users.csv", CSV: csv},
			Steps: []HTTPStep{{Name: "login", Method: "POST", URL: "http://x/login/{{data.username}}",
				Headers: map[string]string{"X-User": "{{data.username}}"}, Body: "p={{data.password}}"}}}
		mut(&p)
		return p
	}
	cases := []struct {
		name string
		p    HTTPParams
		want []string
	}{
		{name: "valid", p: withData(func(*HTTPParams) {})},
		{name: "unknown column", p: withData(func(p *HTTPParams) { p.Steps[0].Body = "{{data.pass}}" }),
			want: []string{`steps[0].body: {{data.pass}}: data file "users.csv" has no column "pass" (columns: username, password)`}},
		{name: "no data file", p: withData(func(p *HTTPParams) { p.Data = nil }),
			want: []string{
				"steps[0].url: {{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow",
				"steps[0].headers.X-User: {{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow",
				"steps[0].body: {{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow",
			}},
		{name: "bad csv leaves references alone", p: withData(func(p *HTTPParams) { p.Data.CSV = "username\n" }),
			want: []string{`data.file: data file "users.csv" has a header row but no rows`}},
		{name: "bad mode", p: withData(func(p *HTTPParams) { p.Data.Mode = 9 }),
			want: []string{"data.mode: must be sequential, random or per_vu, got DataMode(9)"}},
		{name: "header value from a row with a line break", p: withData(func(p *HTTPParams) {
			p.Data.CSV = "username,password\nalice,a1\n\"bo\nb\",b2\n"
		}), want: []string{"steps[0].headers.X-User: {{data.username}}: row 2 of the data file is not a valid header value (control characters, or more than 8192 bytes)"}},
		{name: "URL from the first row must be a URL", p: withData(func(p *HTTPParams) { p.Steps[0].URL = "{{data.username}}" }),
			want: []string{`steps[0].url: must be an http:// or https:// URL with a host, got "alice"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			var got []string
			if err != nil {
				for _, fe := range err.(FieldErrors) {
					got = append(got, fe.Error())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestHTTPDataRowsReachTheTarget runs the http runner against a real
// server that records what each request carried: with sequential rows every
// row arrives the same number of times, and the steps of one iteration
// carry the same row.
func TestHTTPDataRowsReachTheTarget(t *testing.T) {
	type seen struct{ step, user, pass, header, vu string }
	var mu sync.Mutex
	var got []seen
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		pass, _ := strings.CutPrefix(string(body), "pass=")
		mu.Lock()
		got = append(got, seen{step: r.URL.Path[:strings.LastIndexByte(r.URL.Path, '/')], user: r.URL.Query().Get("u"),
			pass: pass, header: r.Header.Get("X-User"), vu: r.Header.Get("X-VU")})
		mu.Unlock()
	})
	var csv strings.Builder
	csv.WriteString("username,password\n")
	const rows = 7
	for i := range rows {
		fmt.Fprintf(&csv, "user%d,\"p,%d\"\n", i, i) // a quoted comma survives
	}
	steps := []HTTPStep{
		{Name: "login", Method: "POST", URL: tg.URL + "/login/{{iteration}}?u={{data.username}}",
			Headers: map[string]string{"X-User": "{{data.username}}", "X-VU": "{{vu}}"}, Body: "pass={{data.password}}"},
		{Name: "profile", Method: "GET", URL: tg.URL + "/profile/{{iteration}}?u={{data.username}}",
			Headers: map[string]string{"X-User": "{{data.username}}", "X-VU": "{{vu}}"}},
	}

	t.Run("sequential", func(t *testing.T) {
		mu.Lock()
		got = nil
		mu.Unlock()
		const rounds = 3
		p := HTTPParams{VUs: 4, Iterations: rows * rounds, Data: &HTTPData{File: "users.csv", CSV: csv.String()}, Steps: steps}
		res, err := runHTTP(t, p, Env{Cores: []int{0, 1}})
		if err != nil || res.Failed != 0 || res.Completed != 2*rows*rounds {
			t.Fatalf("run: %v, completed %d failed %d", err, res.Completed, res.Failed)
		}
		mu.Lock()
		defer mu.Unlock()
		logins := map[string]int{}
		for _, s := range got {
			n := strings.TrimPrefix(s.user, "user")
			if s.header != s.user || (s.step == "/login" && s.pass != "p,"+n) {
				t.Errorf("request %+v mixes rows", s)
			}
			if s.step == "/login" {
				logins[s.user]++
			}
		}
		want := map[string]int{}
		for i := range rows {
			want[fmt.Sprintf("user%d", i)] = rounds
		}
		if !reflect.DeepEqual(logins, want) {
			t.Fatalf("logins per row %v, want %v", logins, want)
		}
		// Both steps of an iteration carry one row: per VU, the profile
		// requests name the users of its logins, in order.
		perVU := map[string][2][]string{}
		for _, s := range got {
			e := perVU[s.vu]
			if s.step == "/login" {
				e[0] = append(e[0], s.user)
			} else {
				e[1] = append(e[1], s.user)
			}
			perVU[s.vu] = e
		}
		for vu, e := range perVU {
			if !reflect.DeepEqual(e[0], e[1]) {
				t.Errorf("VU %s logged in as %v but fetched profiles of %v", vu, e[0], e[1])
			}
		}
	})

	t.Run("per_vu", func(t *testing.T) {
		mu.Lock()
		got = nil
		mu.Unlock()
		p := HTTPParams{VUs: 3, Iterations: 6, Data: &HTTPData{File: "users.csv", Mode: DataPerVU, CSV: csv.String()}, Steps: steps[:1]}
		if _, err := runHTTP(t, p, Env{}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		byVU := map[string]map[string]int{}
		for _, s := range got {
			if byVU[s.vu] == nil {
				byVU[s.vu] = map[string]int{}
			}
			byVU[s.vu][s.user]++
		}
		want := map[string]map[string]int{"1": {"user0": 2}, "2": {"user1": 2}, "3": {"user2": 2}}
		if !reflect.DeepEqual(byVU, want) {
			t.Fatalf("users per VU %v, want %v", byVU, want)
		}
	})
}
