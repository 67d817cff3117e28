package obstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// ExposedNames parses text exposition and returns every sample name it
// exposes: a histogram family X as X_bucket, X_sum and X_count (what
// queries name), a summary's as X, X_sum and X_count, others as X.
func ExposedNames(text []byte) (map[string]bool, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse exposition: %w", err)
	}
	out := make(map[string]bool)
	for name, f := range fams {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out, nil
}
