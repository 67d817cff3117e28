package api

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// csvHeader is the header row of GET /v1/jobs/{id}/results?format=csv.
func csvHeader() []string {
	return []string{"workflow", "step", "completed", "failed", "p50_ms", "p90_ms", "p99_ms", "max_ms",
		"checks_passed", "checks_failed", "checks", "rps", "p95_ms", "p999_ms", "statuses", "errors"}
}

func (s *Server) jobResults(w http.ResponseWriter, r *http.Request) {
	id, ok := jobIDFrom(w, r)
	if !ok {
		return
	}
	format := strings.ToLower(r.URL.Query().Get("format"))
	if format != "" && format != "json" && format != "csv" && format != "html" {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed,
			Error: fmt.Sprintf("format %q: want json, csv or html", format)})
		return
	}
	if wf := workflowQuery(r); wf != "" && format != "html" {
		s.pipelineOutput(w, r, id, wf, format)
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	res, err := s.backend.Results(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("results of job %s: %w", id, err))
		return
	}
	if res == nil {
		s.fail(w, r, fmt.Errorf("results of job %s: backend returned none", id))
		return
	}
	if res.Workflows == nil {
		res.Workflows = []WorkflowStatus{}
	}
	switch format {
	case "html":
		s.jobResultsHTML(ctx, w, r, res)
		return
	case "csv":
	default:
		writeJSON(w, http.StatusOK, res)
		return
	}
	b, err := ResultsCSV(res)
	if err != nil {
		s.fail(w, r, fmt.Errorf("results of job %s as CSV: %w", id, err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-results.csv"`, id))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// ResultsCSV renders results as CSV, one row per workflow step, holding what
// the terminal summary shows. The header is workflow,step,completed,failed,
// p50_ms,p90_ms,p99_ms,max_ms,checks_passed,checks_failed,checks,rps,p95_ms,
// p999_ms,statuses,errors: the columns since "rps" were added after the
// first eleven and follow them, so a reader that takes columns by position
// keeps working. checks is every check of the step as name=passed/failed,
// statuses and errors are counts by HTTP status and by failure class as
// key=count, largest first, all separated by "; ". rps is requests (completed
// and failed) over the workflow's run time, empty when the run time is not
// known. A workflow without steps gets one row with an empty step and its
// own counts, so every workflow appears.
func ResultsCSV(res *Results) ([]byte, error) {
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	if err := cw.Write(csvHeader()); err != nil {
		return nil, err
	}
	for _, wf := range res.Workflows {
		if len(wf.Steps) == 0 {
			row := make([]string, len(csvHeader()))
			row[0], row[2], row[3] = csvText(wf.Name), itoa(wf.CompletedCount), itoa(wf.FailedCount)
			if err := cw.Write(row); err != nil {
				return nil, err
			}
			continue
		}
		for _, st := range wf.Steps {
			var passed, failed int64
			checks := make([]string, len(st.Checks))
			for i, c := range st.Checks {
				passed += c.Passed
				failed += c.Failed
				checks[i] = fmt.Sprintf("%s=%d/%d", c.Name, c.Passed, c.Failed)
			}
			row := []string{csvText(wf.Name), csvText(st.Name), itoa(st.Completed), itoa(st.Failed),
				ms(st.P50Ms), ms(st.P90Ms), ms(st.P99Ms), ms(st.MaxMs),
				itoa(passed), itoa(failed), csvText(strings.Join(checks, "; ")),
				perSecond(st.Completed+st.Failed, wf.ElapsedSeconds), ms(st.P95Ms), ms(st.P999Ms),
				csvText(countsText(st.Statuses)), csvText(countsText(st.Errors))}
			if err := cw.Write(row); err != nil {
				return nil, err
			}
		}
	}
	cw.Flush()
	return buf.Bytes(), cw.Error()
}

// csvText defuses spreadsheet formula injection: a cell a spreadsheet would
// evaluate (leading = + - @) gets a leading apostrophe. Names come from job
// files, which any client can write.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// perSecond is n per second over secs, or empty when the run time is unknown.
func perSecond(n int64, secs float64) string {
	if secs <= 0 {
		return ""
	}
	return strconv.FormatFloat(float64(n)/secs, 'f', 1, 64)
}

// countsText writes counts as key=count, largest first (then by key), so
// the same counts always give the same cell.
func countsText(m map[string]int64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + itoa(m[k])
	}
	return strings.Join(parts, "; ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
