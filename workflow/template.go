package workflow

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Templates let a step's url, header values and body vary per request:
//
//	{{vu}}              the VU's number, from 1 (k6's __VU)
//	{{iteration}}       the VU's own iteration count, from 0 (k6's __ITER)
//	{{random_int a b}}  a uniformly random integer in [a, b]
//	{{data.column}}     the iteration's row of the workflow's data file
//	                    (data.go), in the column its header row names
//	{{name}}            a value an earlier step captured (flow.go)
//	{{secret.NAME}}     a secret the submitter gave (header values and
//	                    bodies only), bound once per run by bindSecrets
//
// A template is parsed once, when params are validated and again when a
// runner is built from them (both per dispatch, never per request); a
// request renders the parsed parts with a strings.Builder. "{{" always opens
// an action: there is no escape, since none of the supported fields has a
// syntax where a literal "{{" is common.

// maxTemplateActions bounds the actions in one field, so a hostile spec
// cannot make every request render a million random numbers.
const maxTemplateActions = 64

// templateFuncs lists the known functions, for error messages.
const templateFuncs = "vu, iteration, random_int, data.<column>, secret.<NAME>, <captured name>"

// builtinFuncs lists the functions that are not captured values.
const builtinFuncs = "vu, iteration, random_int, data.<column>"

// dataPrefix starts a data-file reference, secretPrefix a secret's.
const (
	dataPrefix   = "data."
	secretPrefix = "secret."
)

// tmplVars is what a request's templates render from.
type tmplVars struct {
	vu        int   // 1-based
	iteration int64 // the VU's own, 0-based
	row       []string
	// captured holds the VU's captured values by slot (nil when the
	// workflow captures nothing); a step runs only once every slot it
	// renders is set.
	captured []string
}

type tmplOp uint8

const (
	opLiteral tmplOp = iota
	opVU
	opIteration
	opRandomInt
	opData
	opVar
	opSecret
)

type tmplPart struct {
	op   tmplOp
	lit  string // opLiteral
	a, b int64  // opRandomInt, a <= b
	// opData: the column's name, then, once bound to a table, its index and
	// the first row's value, which stands in for every row in sample.
	column  string
	col     int
	example string
	// opVar: the captured variable's name and, once bound, its slot;
	// opSecret: the secret's name.
	name string
	slot int
}

// template is a parsed field. The zero value renders "".
type template struct {
	parts []tmplPart
	// static is the whole value when it has no actions, so the common case
	// renders without building anything.
	static  string
	dynamic bool
}

// parseTemplate parses s. Errors name what is wrong and where in s, and are
// placed at the field by the caller.
func parseTemplate(s string) (*template, error) {
	t := &template{}
	rest, actions := s, 0
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			if rest != "" {
				t.parts = append(t.parts, tmplPart{op: opLiteral, lit: rest})
			}
			break
		}
		if open > 0 {
			t.parts = append(t.parts, tmplPart{op: opLiteral, lit: rest[:open]})
		}
		end := strings.Index(rest[open+2:], "}}")
		if end < 0 {
			return nil, fmt.Errorf("template at byte %d: unclosed {{", len(s)-len(rest)+open)
		}
		if actions++; actions > maxTemplateActions {
			return nil, fmt.Errorf("template has more than %d {{...}} actions", maxTemplateActions)
		}
		part, err := parseAction(rest[open+2 : open+2+end])
		if err != nil {
			return nil, fmt.Errorf("template at byte %d: %w", len(s)-len(rest)+open, err)
		}
		t.parts = append(t.parts, part)
		rest = rest[open+2+end+2:]
	}
	t.dynamic = actions > 0
	if !t.dynamic {
		t.static = s
	}
	return t, nil
}

func parseAction(src string) (tmplPart, error) {
	words := strings.Fields(src)
	if len(words) == 0 {
		return tmplPart{}, fmt.Errorf("empty {{}}; want one of %s", templateFuncs)
	}
	args := words[1:]
	noArgs := func(op tmplOp) (tmplPart, error) {
		if len(args) > 0 {
			return tmplPart{}, fmt.Errorf("{{%s}} takes no arguments, got %d", words[0], len(args))
		}
		return tmplPart{op: op}, nil
	}
	if col, ok := strings.CutPrefix(words[0], dataPrefix); ok {
		if col == "" {
			return tmplPart{}, fmt.Errorf("{{data.}} needs a column name, as in {{data.username}}")
		}
		if len(args) > 0 {
			return tmplPart{}, fmt.Errorf("{{%s}} takes no arguments, got %d", truncate(words[0], 40), len(args))
		}
		return tmplPart{op: opData, column: col, col: -1}, nil
	}
	if name, ok := strings.CutPrefix(words[0], secretPrefix); ok {
		if !isVarName(name) && !isSecretName(name) {
			return tmplPart{}, fmt.Errorf("{{secret.%s}}: a secret's name is letters, digits and _", truncate(name, 40))
		}
		if len(args) > 0 {
			return tmplPart{}, fmt.Errorf("{{secret.%s}} takes no arguments, got %d", name, len(args))
		}
		return tmplPart{op: opSecret, name: name}, nil
	}
	switch words[0] {
	case "vu":
		return noArgs(opVU)
	case "iteration":
		return noArgs(opIteration)
	case "random_int":
		if len(args) != 2 {
			return tmplPart{}, fmt.Errorf("{{random_int a b}} takes two integers, got %d arguments", len(args))
		}
		a, errA := strconv.ParseInt(args[0], 10, 64)
		b, errB := strconv.ParseInt(args[1], 10, 64)
		if errA != nil || errB != nil {
			return tmplPart{}, fmt.Errorf("{{random_int a b}} takes two integers, got %q and %q", truncate(args[0], 20), truncate(args[1], 20))
		}
		if a > b {
			return tmplPart{}, fmt.Errorf("{{random_int %d %d}}: the lower bound is above the upper", a, b)
		}
		if a == math.MinInt64 && b == math.MaxInt64 {
			// b-a+1 overflows; the full range is refused rather than
			// special-cased, since no test needs it.
			return tmplPart{}, fmt.Errorf("{{random_int}}: the range is too wide")
		}
		return tmplPart{op: opRandomInt, a: a, b: b}, nil
	default:
		if isVarName(words[0]) {
			if len(args) > 0 {
				return tmplPart{}, fmt.Errorf("{{%s}} (a captured value) takes no arguments, got %d", words[0], len(args))
			}
			return tmplPart{op: opVar, name: words[0], slot: -1}, nil
		}
		return tmplPart{}, fmt.Errorf("unknown template function %q (known: %s)", truncate(words[0], 40), templateFuncs)
	}
}

// render returns the value for one request. Random numbers come from
// math/rand/v2's global source, which is per-thread in the runtime and so
// takes no lock shared by VUs; they are load, not secrets.
func (t *template) render(v tmplVars) string {
	if !t.dynamic {
		return t.static
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.op {
		case opLiteral:
			b.WriteString(p.lit)
		case opVU:
			b.WriteString(strconv.Itoa(v.vu))
		case opIteration:
			b.WriteString(strconv.FormatInt(v.iteration, 10))
		case opRandomInt:
			// Unsigned arithmetic keeps wide ranges (a < 0 < b) correct
			// where Int64N(b-a+1) would overflow; the sum wraps back into
			// [a, b] in two's complement.
			b.WriteString(strconv.FormatInt(p.a+int64(rand.Uint64N(uint64(p.b)-uint64(p.a)+1)), 10))
		case opData:
			b.WriteString(v.row[p.col])
		case opVar:
			b.WriteString(v.captured[p.slot])
		case opSecret:
			// bindSecrets turned every secret into a literal; an unbound
			// one renders nothing rather than its name.
		}
	}
	return b.String()
}

// sample renders with fixed values, for validating what a field will look
// like (a templated URL must still be a URL): the lower bound of each
// random_int, VU 1, iteration 0, the data file's first row (an unbound
// data reference renders empty).
func (t *template) sample() string {
	if !t.dynamic {
		return t.static
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.op {
		case opLiteral:
			b.WriteString(p.lit)
		case opVU:
			b.WriteString("1")
		case opIteration:
			b.WriteString("0")
		case opRandomInt:
			b.WriteString(strconv.FormatInt(p.a, 10))
		case opData:
			b.WriteString(p.example)
		case opVar:
			b.WriteString("captured")
		case opSecret:
			b.WriteString("secret")
		}
	}
	return b.String()
}

// usesData reports whether t has a {{data.x}} reference.
func (t *template) usesData() bool {
	return slices.ContainsFunc(t.parts, func(p tmplPart) bool { return p.op == opData })
}

// varNames lists the captured variables t renders, in order (repeats kept).
func (t *template) varNames() []string {
	var out []string
	for _, p := range t.parts {
		if p.op == opVar {
			out = append(out, p.name)
		}
	}
	return out
}

// secretNames lists the secrets t renders, in order (repeats kept).
func (t *template) secretNames() []string {
	var out []string
	for _, p := range t.parts {
		if p.op == opSecret {
			out = append(out, p.name)
		}
	}
	return out
}

// bindSecrets replaces t's secret references by their values, once per
// run, so a request renders them as literals; a template left with only
// literals renders as a static one again. A name secrets lacks is an error
// (Validate refuses it first).
func (t *template) bindSecrets(secrets map[string]string) error {
	literal := true
	for i := range t.parts {
		p := &t.parts[i]
		if p.op == opSecret {
			v, ok := secrets[p.name]
			if !ok {
				return fmt.Errorf("{{secret.%s}}: no value was given", truncate(p.name, 40))
			}
			*p = tmplPart{op: opLiteral, lit: v}
		}
		literal = literal && p.op == opLiteral
	}
	if literal && t.dynamic {
		var b strings.Builder
		for _, p := range t.parts {
			b.WriteString(p.lit)
		}
		t.static, t.dynamic = b.String(), false
	}
	return nil
}

// isSecretName accepts environment-variable style names (API_TOKEN).
func isSecretName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// usesVars reports whether t renders a captured variable.
func (t *template) usesVars() bool {
	return slices.ContainsFunc(t.parts, func(p tmplPart) bool { return p.op == opVar })
}

// bindVars resolves t's captured variables to slots, appending each slot
// to needs; a name slotOf does not know is an error (Validate refuses it
// first).
func (t *template) bindVars(slotOf map[string]int, needs []int) ([]int, error) {
	for i := range t.parts {
		p := &t.parts[i]
		if p.op != opVar {
			continue
		}
		s, ok := slotOf[p.name]
		if !ok {
			return needs, fmt.Errorf("{{%s}}: no step captures it", truncate(p.name, 40))
		}
		p.slot = s
		if !slices.Contains(needs, s) {
			needs = append(needs, s)
		}
	}
	return needs, nil
}

// bind resolves t's data references to table's columns. A template must be
// bound before it renders a row; render indexes the row by column.
func (t *template) bind(table *dataTable) error {
	for i := range t.parts {
		p := &t.parts[i]
		if p.op != opData {
			continue
		}
		col, ok := table.index[p.column]
		if !ok {
			return fmt.Errorf("{{data.%s}}: data file %q has no column %q (columns: %s)",
				truncate(p.column, 40), truncate(table.file, 80), truncate(p.column, 40), table.columnList())
		}
		p.col, p.example = col, table.rows[0][col]
	}
	return nil
}

// checkData checks t's data references against what the workflow has:
// data is nil without a data file, and table is nil when the data file has
// a problem of its own (already reported), which leaves references
// unchecked rather than reporting each one as unknown.
func (t *template) checkData(data *HTTPData, table *dataTable) error {
	switch {
	case !t.usesData():
		return nil
	case data == nil:
		return errors.New("{{data.<column>}} needs a data file: add data: {file: users.csv} to the workflow")
	case table == nil:
		return nil
	}
	return t.bind(table)
}

// checkHeaderRows checks that every row of table renders t as a valid
// header value: a data value with a line break would otherwise fail every
// request that draws its row, and only at run time. t must be bound.
func (t *template) checkHeaderRows(table *dataTable) error {
	if table == nil {
		return nil
	}
	for _, p := range t.parts {
		if p.op != opData {
			continue
		}
		for i, row := range table.rows {
			if v := row[p.col]; len(v) > maxHeaderLen || !validHeaderValue(v) {
				return fmt.Errorf("{{data.%s}}: row %d of the data file is not a valid header value (control characters, or more than %d bytes)",
					truncate(p.column, 40), i+1, maxHeaderLen)
			}
		}
	}
	return nil
}
