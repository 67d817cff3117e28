package obstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// DashboardQueries returns every PromQL expression of a Grafana dashboard
// JSON file: the targets of its panels, rows' panels included.
func DashboardQueries(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	var walk func([]json.RawMessage) error
	walk = func(ps []json.RawMessage) error {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("%s: panel: %w", path, err)
			}
			for _, t := range p.Targets {
				if t.Expr == "" {
					return fmt.Errorf("%s: panel %q has a target with no expr", path, p.Title)
				}
				out = append(out, t.Expr)
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	return out, nil
}

// metricName matches the metric names a Tempest query may use: the nodes'
// own (tempest_) and the runtime and process collectors' (go_, process_).
// Label names, functions and keywords never start with these prefixes, so
// a query naming any other metric names none, and QueryMetrics says so.
var metricName = regexp.MustCompile(`\b(?:tempest|go|process)_[a-zA-Z0-9_:]*`)

// QueryMetrics returns the metric names expr uses.
func QueryMetrics(expr string) []string {
	names := metricName.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// ExposedNames reads text exposition and returns every sample name it
// declares: a histogram family X as X_bucket, X_sum and X_count (what
// queries name), a summary's as X, X_sum and X_count, others as X. It reads
// the TYPE lines, which the client library writes for every family it
// exposes; a family without one is an error.
func ExposedNames(text []byte) (map[string]bool, error) {
	out := make(map[string]bool)
	typed := make(map[string]bool)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				return nil, fmt.Errorf("parse exposition: %q", line)
			}
			typed[f[0]] = true
			switch f[1] {
			case "histogram", "gaugehistogram":
				out[f[0]+"_bucket"], out[f[0]+"_sum"], out[f[0]+"_count"] = true, true, true
			case "summary":
				out[f[0]], out[f[0]+"_sum"], out[f[0]+"_count"] = true, true, true
			default:
				out[f[0]] = true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if !out[name] {
			return nil, fmt.Errorf("parse exposition: sample %q of no declared family", name)
		}
	}
	return out, sc.Err()
}
