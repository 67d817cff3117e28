package rainstorm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLineCodecRoundTrip(t *testing.T) {
	fields := []string{"a\tb", "c\nd\r", `e\f`, "", "plain"}
	line := appendLine(nil, fields)
	if strings.Count(string(line), "\n") != 1 {
		t.Fatalf("line %q holds a raw newline", line)
	}
	if got := splitLine(trimEOL(line)); !reflect.DeepEqual(got, fields) {
		t.Fatalf("round trip %q, want %q", got, fields)
	}
	if got := splitLine([]byte(`A\NB`)); got[0] != `A\NB` {
		t.Fatalf("unknown escape decoded to %q", got[0])
	}
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "op.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func execStage(t *testing.T, argv ...string) *CompiledStage {
	t.Helper()
	return compileStage(t, nil, Stage{Name: "x", Op: OpExec, Command: argv})
}

// TestExampleOperator runs examples/rainstorm-upper.sh over the traffic
// signs and compares with the same filter and upper-casing done in Go.
func TestExampleOperator(t *testing.T) {
	in := readShared(t, fullCSV, true)
	script, _ := filepath.Abs("../examples/rainstorm-upper.sh")
	ex, err := execStage(t, script).NewExec(ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	var out []Record
	for i := 0; i < len(in); i += 1000 {
		out, err = ex.Apply(in[i:min(i+1000, len(in))], out, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	var want []Record
	for _, r := range in {
		if strings.Contains(r.Fields[6], "Telespar") {
			f := append([]string(nil), r.Fields...)
			f[8] = strings.ToUpper(f[8])
			want = append(want, Record{ID: r.ID, Fields: f})
		}
	}
	if len(want) == 0 || !reflect.DeepEqual(out, want) {
		t.Fatalf("exec gave %d records, want %d (equal: %v)", len(out), len(want), reflect.DeepEqual(out, want))
	}
	if ex.Restarts() != 0 {
		t.Fatalf("%d restarts", ex.Restarts())
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestExecRestartsAfterCrash: a program that dies once (after answering a
// few records) is restarted and the output is complete, without repeats.
func TestExecRestartsAfterCrash(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "crashed")
	script := writeScript(t, `n=0
while IFS= read -r line; do
  n=$((n+1))
  if [ $n -eq 3 ] && [ ! -e `+mark+` ]; then touch `+mark+`; echo dying >&2; exit 3; fi
  echo "forward	$line"
done
`)
	ex, err := execStage(t, script).NewExec(ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	in := recs([]string{"a"}, []string{"b"}, []string{"c"}, []string{"d"}, []string{"e"})
	out, err := ex.Apply(in, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) || ex.Restarts() != 1 {
		t.Fatalf("out %v, restarts %d; want the input and 1", out, ex.Restarts())
	}
}

// TestExecFailsAfterRepeatedCrashes: a program that always dies fails the
// stage with its stderr tail, and a protocol violation is named.
func TestExecFailsAfterRepeatedCrashes(t *testing.T) {
	script := writeScript(t, "echo 'cannot parse the input: boom' >&2\nexit 2\n")
	ex, _ := execStage(t, script).NewExec(ExecOptions{MaxCrashes: 3})
	_, err := ex.Apply(recs([]string{"a"}), nil, nil)
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Restarts != 2 || !strings.Contains(err.Error(), "cannot parse the input: boom") {
		t.Fatalf("error %v, want an ExecError after 2 restarts with the stderr tail", err)
	}
	ex.Close()

	liar := writeScript(t, "while read -r l; do echo maybe; done\n")
	ex, _ = execStage(t, liar).NewExec(ExecOptions{})
	_, err = ex.Apply(recs([]string{"a"}), nil, nil)
	if err == nil || !strings.Contains(err.Error(), `answered "maybe"`) {
		t.Fatalf("error %v, want the protocol violation named", err)
	}
	ex.Close()

	ex, _ = execStage(t, "/no/such/program").NewExec(ExecOptions{})
	if _, err = ex.Apply(recs([]string{"a"}), nil, nil); err == nil || !strings.Contains(err.Error(), "start /no/such/program") {
		t.Fatalf("error %v, want a start failure", err)
	}
}

// FuzzExecLine: any answer line decodes, and what it decodes to encodes
// back to a line that decodes the same.
func FuzzExecLine(f *testing.F) {
	f.Add([]byte("a\\tb\tc\\nd\\\\"))
	f.Add([]byte("\\"))
	f.Fuzz(func(t *testing.T, line []byte) {
		fields := splitLine(line)
		enc := appendLine(nil, fields)
		if got := splitLine(trimEOL(enc)); !reflect.DeepEqual(got, fields) {
			t.Fatalf("%q -> %q -> %q", line, fields, got)
		}
	})
}

// splitLineByByte is the protocol's decoding written the plain way, a
// byte at a time into a builder per field: what splitLine, which cuts
// every field from one string, must agree with.
func splitLineByByte(line []byte) []string {
	var fields []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\t':
			fields = append(fields, cur.String())
			cur.Reset()
		case c == '\\' && i+1 < len(line):
			i++
			switch line[i] {
			case '\\':
				cur.WriteByte('\\')
			case 't':
				cur.WriteByte('\t')
			case 'n':
				cur.WriteByte('\n')
			case 'r':
				cur.WriteByte('\r')
			default:
				cur.WriteByte('\\')
				cur.WriteByte(line[i])
			}
		default:
			cur.WriteByte(c)
		}
	}
	return append(fields, cur.String())
}

// FuzzExecLineByByte: splitLine decodes every line as the byte-at-a-time
// decoding does, escaped tabs, unknown escapes, a trailing backslash and
// empty fields included.
func FuzzExecLineByByte(f *testing.F) {
	for _, s := range []string{"", "\t", "a\tb", `a\tb` + "\tc", `x\`, `\\\t`, `A\NB` + "\t\t", "é\t\\r\\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if got, want := splitLine(line), splitLineByByte(line); !reflect.DeepEqual(got, want) {
			t.Fatalf("splitLine(%q) = %q, want %q", line, got, want)
		}
	})
}

// BenchmarkExecLine: one record of the traffic-signs file's width
// encoded to a protocol line (encode) and an answer line decoded
// (decode), as an exec stage does per record (-benchmem: allocations per
// record).
func BenchmarkExecLine(b *testing.B) {
	fields := make([]string, 20)
	for i := range fields {
		fields[i] = fmt.Sprintf("field %d of a sign record", i)
	}
	fields[3] = "with\ta tab"
	line := appendLine(nil, fields)
	b.Run("encode", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = appendLine(buf[:0], fields)
		}
	})
	b.Run("decode", func(b *testing.B) {
		var e Exec // as round decodes an answer: the fields cut from its slab
		b.ReportAllocs()
		for b.Loop() {
			l := trimEOL(line)
			if got := appendFields(e.slab.take(lineFields(l)), l); len(got) != len(fields) {
				b.Fatalf("%d fields", len(got))
			}
		}
	})
}
