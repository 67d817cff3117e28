package workflow

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	cases := []struct {
		src     string
		vars    tmplVars
		want    string // rendered with vars; random_int ranges here are one value wide
		wantErr string
	}{
		{src: "", want: ""},
		{src: "http://x/plain", want: "http://x/plain"},
		{src: "/vu/{{vu}}/it/{{iteration}}", vars: tmplVars{vu: 3, iteration: 41}, want: "/vu/3/it/41"},
		{src: "{{ vu }}{{iteration}}", vars: tmplVars{vu: 1, iteration: 0}, want: "10"},
		{src: "id={{random_int 7 7}}", want: "id=7"},
		{src: "{{random_int -5 -5}}", want: "-5"},
		{src: `{"a":{"b":1}}`, want: `{"a":{"b":1}}`}, // "}}" alone is literal
		{src: "{{no.pe}}", wantErr: `template at byte 0: unknown template function "no.pe" (known: vu, iteration, random_int, data.<column>, secret.<NAME>, <captured name>)`},
		{src: "x{{vu", wantErr: "template at byte 1: unclosed {{"},
		{src: "{{}}", wantErr: "empty {{}}"},
		{src: "{{vu 1}}", wantErr: "{{vu}} takes no arguments, got 1"},
		{src: "{{random_int 1}}", wantErr: "takes two integers, got 1 arguments"},
		{src: "{{random_int a b}}", wantErr: `takes two integers, got "a" and "b"`},
		{src: "{{random_int 9 1}}", wantErr: "the lower bound is above the upper"},
		{src: strings.Repeat("{{vu}}", maxTemplateActions+1), wantErr: "more than 64"},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			tmpl, err := parseTemplate(tc.src)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tmpl.render(tc.vars); got != tc.want {
				t.Fatalf("rendered %q, want %q", got, tc.want)
			}
			if tmpl.dynamic != strings.Contains(tc.src, "{{") {
				t.Fatalf("dynamic = %v for %q", tmpl.dynamic, tc.src)
			}
		})
	}
}

func TestRandomIntStaysInRange(t *testing.T) {
	for _, r := range [][2]int64{{1, 3}, {-2, 2}, {-1 << 62, 1 << 62}, {math.MinInt64, 0}} {
		tmpl, err := parseTemplate("{{random_int " + strconv.FormatInt(r[0], 10) + " " + strconv.FormatInt(r[1], 10) + "}}")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for range 2000 {
			v, err := strconv.ParseInt(tmpl.render(tmplVars{}), 10, 64)
			if err != nil || v < r[0] || v > r[1] {
				t.Fatalf("range %v: rendered %d (%v)", r, v, err)
			}
			seen[v] = true
		}
		if small := r[0] >= -2 && r[1] <= 3; small && int64(len(seen)) != r[1]-r[0]+1 {
			t.Fatalf("range %v: only %d distinct values in 2000 draws", r, len(seen))
		}
	}
}

func TestBodyMatcherAcrossWrites(t *testing.T) {
	body := strings.Repeat("x", 100) + "needle" + strings.Repeat("y", 100)
	for _, tc := range []struct {
		needle string
		chunk  int
		want   bool
	}{
		{"needle", 1, true},
		{"needle", 3, true},
		{"needle", 103, true}, // split inside the needle
		{"needle", 1000, true},
		{"x", 7, true},
		{"xy", 1, false},
		{"needles", 2, false},
		{strings.Repeat("y", 100), 9, true},
		{strings.Repeat("y", 101), 9, false},
	} {
		m := &bodyMatcher{needle: []byte(tc.needle)}
		for b := []byte(body); len(b) > 0; {
			n := min(tc.chunk, len(b))
			if w, err := m.Write(b[:n]); w != n || err != nil {
				t.Fatalf("write %d: %d, %v", n, w, err)
			}
			b = b[n:]
		}
		if m.found != tc.want {
			t.Errorf("needle %q in chunks of %d: found %v, want %v", truncate(tc.needle, 10), tc.chunk, m.found, tc.want)
		}
		if len(m.tail) >= len(tc.needle) && len(tc.needle) > 0 {
			t.Errorf("tail kept %d bytes for a %d-byte needle", len(m.tail), len(tc.needle))
		}
	}
}
