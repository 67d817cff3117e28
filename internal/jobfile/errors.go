package jobfile

import (
	"fmt"
	"strings"

	"tempest/workflow"
)

// Problem is one thing wrong with a job file: its line (0 when it concerns
// the whole file), the field path ("workflows[0].steps[1].url", empty for the
// top level) and what is wrong.
type Problem = workflow.Problem

// Error lists every problem found in a job file. The API layer returns
// Problems as JSON; the CLI prints Error() (one "file:line: path: message"
// per line, as compilers do, so editors can jump to them).
type Error struct {
	File     string    `json:"file,omitempty"`
	Problems []Problem `json:"problems"`
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
}
