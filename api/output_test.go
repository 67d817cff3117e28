package api

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

// A large output moves in several pages, each within the page budget, and
// the pages put back together are the output.
func TestOutputPages(t *testing.T) {
	out := &PipelineOutput{JobID: "j", Workflow: "w", Complete: true, Header: []string{"a", "b"}, BadRecords: 2,
		Tasks:      []PipelineTask{{Stage: 1, Name: "count", Waiting: "no free core"}},
		StageTasks: []int{1, 3},
		Resizes:    []PipelineResize{{At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Stage: "count", From: 2, To: 3, Decision: "2 → 3 tasks"}}}
	for i := range 40000 {
		out.Rows = append(out.Rows, []string{fmt.Sprint(i), strings.Repeat("x", 100)})
	}
	out.Rows = append(out.Rows, []string{"huge", strings.Repeat("y", OutputPageBudget+1)}) // alone in its page
	var got *PipelineOutput
	pages := 0
	for got == nil || len(got.Rows) < len(out.Rows) {
		offset := 0
		if got != nil {
			offset = len(got.Rows)
		}
		p := OutputPage(out, uint64(offset))
		b, err := wire.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > wire.MaxMessageSize {
			t.Fatalf("page %d is %d bytes", pages, len(b))
		}
		if len(p.Rows) == 0 || p.Total != uint64(len(out.Rows)) || p.Offset != uint64(offset) {
			t.Fatalf("page at %d: %d rows, total %d, offset %d", offset, len(p.Rows), p.Total, p.Offset)
		}
		if len(p.Rows) > 1 && len(b) > 2*OutputPageBudget {
			t.Fatalf("page %d of %d rows is %d bytes, over the budget", pages, len(p.Rows), len(b))
		}
		pages++
		if got == nil {
			got = OutputFromPage("j", "w", p)
		} else {
			got.Rows = append(got.Rows, p.Rows...)
		}
	}
	if pages < 3 {
		t.Fatalf("%d pages: the output should not fit in one", pages)
	}
	if !slices.EqualFunc(got.Rows, out.Rows, slices.Equal) || !slices.Equal(got.Header, out.Header) ||
		got.BadRecords != 2 || !got.Complete || len(got.Tasks) != 1 || got.Tasks[0].Waiting != "no free core" ||
		!slices.Equal(got.StageTasks, out.StageTasks) || !slices.EqualFunc(got.Resizes, out.Resizes, func(a, b PipelineResize) bool {
		return a.At.Equal(b.At) && a.Stage == b.Stage && a.From == b.From && a.To == b.To && a.Decision == b.Decision
	}) {
		t.Fatalf("pages put back together differ from the output")
	}
}

// The output written row by row is byte for byte what the API wrote for
// the whole output at once: JSON as its encoder writes the struct, CSV as
// a csv.Writer writes every row. Rows with characters JSON and CSV escape,
// a row of no fields (JSON null), no header, and no rows at all.
func TestStreamedOutputIsTheWholeOutput(t *testing.T) {
	tricky := [][]string{{"a", "1"}, {`q"uote`, "<b>&amp;</b>"}, nil, {}, {"comma,here", "new\nline"}, {"ünï", "\u2028", ",\"rows\":[]"}, {"=1+2", " lead"}}
	for _, out := range []*PipelineOutput{
		{JobID: "j", Workflow: "w", Complete: true, Header: []string{"key", "value"}, Rows: tricky, BadRecords: 3, BadFirst: []uint64{4},
			Tasks: []PipelineTask{{Name: "source"}}, StageTasks: []int{1, 2}, AutoscaleHeld: "why",
			Resizes: []PipelineResize{{At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Stage: "count", From: 1, To: 2}}},
		{JobID: "j", Workflow: `w,"rows":[]`, Rows: tricky},
		{JobID: "j", Workflow: "w", Rows: [][]string{}},
	} {
		var want, got bytes.Buffer
		writeJSON(httptestRecorder(&want), http.StatusOK, out)
		if err := writeOutputJSON(&got, out, slices.Values(out.Rows)); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("streamed JSON\n%s\nwant\n%s", got.String(), want.String())
		}
		want.Reset()
		got.Reset()
		cw := csv.NewWriter(&want)
		if len(out.Header) > 0 {
			_ = cw.Write(out.Header)
		}
		_ = cw.WriteAll(out.Rows)
		if err := writeOutputCSV(&got, out, slices.Values(out.Rows)); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("streamed CSV\n%q\nwant\n%q", got.String(), want.String())
		}
	}
}

// httptestRecorder is a ResponseWriter writing its body to b.
func httptestRecorder(b *bytes.Buffer) http.ResponseWriter {
	rec := httptest.NewRecorder()
	rec.Body = b
	return rec
}
