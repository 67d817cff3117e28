package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"tempest/wire"
)

// A large output moves in several pages, each within the page budget, and
// the pages put back together are the output.
func TestOutputPages(t *testing.T) {
	out := &PipelineOutput{JobID: "j", Workflow: "w", Complete: true, Header: []string{"a", "b"}, BadRecords: 2,
		Tasks: []PipelineTask{{Stage: 1, Name: "count", Waiting: "no free core"}}}
	for i := range 40000 {
		out.Rows = append(out.Rows, []string{fmt.Sprint(i), strings.Repeat("x", 100)})
	}
	out.Rows = append(out.Rows, []string{"huge", strings.Repeat("y", outputPageBudget+1)}) // alone in its page
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
		if len(p.Rows) > 1 && len(b) > 2*outputPageBudget {
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
		got.BadRecords != 2 || !got.Complete || len(got.Tasks) != 1 || got.Tasks[0].Waiting != "no free core" {
		t.Fatalf("pages put back together differ from the output")
	}
}
