package workflow

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"tempest/wire"
)

// NodeKind says what a Node holds.
type NodeKind uint8

// The kinds of Node.
const (
	ScalarNode NodeKind = iota + 1
	MapNode
	ListNode
)

func (k NodeKind) String() string {
	switch k {
	case ScalarNode:
		return "a scalar"
	case MapNode:
		return "a mapping"
	case ListNode:
		return "a list"
	default:
		return "nothing"
	}
}

// Node is one value of a job file with its source line. jobfile builds the
// tree from YAML (after refusing aliases, merge keys, custom tags and
// duplicate keys), so workflow types see plain data and never depend on the
// YAML library.
type Node struct {
	Kind NodeKind
	Line int
	// Value is a scalar's decoded value: nil, bool, int64, float64 or string.
	Value any
	// Text is a scalar as written, for messages and for string fields given
	// as numbers (a header value of 5 is the string "5").
	Text   string
	Fields []Field // MapNode, in source order, keys unique
	Items  []*Node // ListNode
	// Invalid marks a value refused while the tree was built (an alias, a
	// custom tag), whose problem is already reported: readers treat its key
	// as present but unusable and add no complaint of their own.
	Invalid bool
}

func (n *Node) isNull() bool {
	return n == nil || (n.Kind == ScalarNode && n.Value == nil && !n.Invalid)
}

// Field is one key of a mapping.
type Field struct {
	Key   string
	Line  int
	Value *Node
}

// Problem is one thing wrong with a job file: where (line and field path,
// e.g. "workflows[0].steps[1].url") and what.
type Problem struct {
	Line    int    `json:"line,omitempty"`
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// FieldError is one invalid parameter, named by its path relative to the
// workflow in job-file spelling ("vus", "steps[2].url").
type FieldError struct {
	Path    string
	Message string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// FieldErrors is every problem Validate found, so a caller can show them all
// at once; DecodeParams and New return it (wrapped) for bad params.
type FieldErrors []FieldError

func (e FieldErrors) Error() string {
	msgs := make([]string, len(e))
	for i, fe := range e {
		msgs[i] = fe.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e *FieldErrors) add(path, format string, args ...any) {
	*e = append(*e, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns nil for an empty list, so a typed nil never hides in an error.
func (e FieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

// Fields reads the keys of one job-file mapping. Every read marks its key as
// known; Finish reports the keys nobody read, so a typo cannot silently fall
// back to a default. Type problems are recorded where they are found, with
// the key's line, and the reader carries on so that every problem is
// reported at once.
type Fields struct {
	path  string
	node  *Node
	bad   bool // not a mapping: already reported, so nothing in it is "required"
	line  int
	used  map[string]bool
	asked []string // keys looked up, present or not: candidates for "did you mean"
	sink  *problemSink
}

type problemSink struct {
	problems []Problem
	// parsePaths holds paths that already have a problem from reading, so a
	// Validate complaint about the zero value left behind is not piled on.
	parsePaths map[string]bool
	objects    []*Fields
	// guesses counts "did you mean" suggestions, which cost an edit distance
	// per known key: a hostile file of a million unknown keys gets a few.
	guesses int
	// readData fetches data files (nil: none can be read); dataBytes is
	// what the file has read so far, against MaxDataSize.
	readData  DataReader
	dataBytes int
	// blobOf names the blob (hex SHA-256) a data file was uploaded as; nil
	// or false: the file travels inside the params.
	blobOf func(name string) (string, bool)
	// secret looks up {{secret.NAME}} values (nil: none are known).
	secret SecretLookup
	// readTLS fetches the CA, certificate and key files a workflow's tls:
	// names (nil: none can be read).
	readTLS DataReader
}

// SecretLookup returns the value of a secret a job file names as
// {{secret.NAME}}, which `tempest submit` takes from its --secret flags or
// its environment and sends apart from the job file.
type SecretLookup func(name string) (string, bool)

// DataReader returns the content of a data file named in a job file, by the
// name as written there. jobfile provides one that reads relative to the
// job file's directory and one over files uploaded with it. A reader should
// stop reading past MaxDataSize.
type DataReader func(name string) ([]byte, error)

const maxGuesses = 100

// NewFields starts reading a mapping whose path is path ("" for a file's
// top level). A node that is not a mapping is recorded as a problem and reads
// as empty.
func NewFields(path string, n *Node) *Fields {
	return newFields(path, n, 0, &problemSink{parsePaths: map[string]bool{}})
}

func newFields(path string, n *Node, line int, sink *problemSink) *Fields {
	f := &Fields{path: path, used: map[string]bool{}, sink: sink, line: line}
	if n != nil {
		f.line = n.Line
	}
	switch {
	case n != nil && n.Invalid:
		f.sink.parsePaths[path] = true
		f.bad = true
		n = nil
	case n != nil && n.Kind != MapNode:
		f.problemAt(f.line, path, fmt.Sprintf("must be a mapping, got %s", describe(n)))
		f.bad = true
		n = nil
	}
	f.node = n
	sink.objects = append(sink.objects, f)
	return f
}

// ReadDataWith sets how DataFile reads data files, for the whole tree f
// belongs to. Without it every data file is a problem.
func (f *Fields) ReadDataWith(read DataReader) {
	f.sink.readData = read
}

// SecretsWith sets where Secret finds values, for the whole tree f
// belongs to.
func (f *Fields) SecretsWith(lookup SecretLookup) {
	f.sink.secret = lookup
}

// Secret is the value of the secret name; false when the submitter gave
// none.
func (f *Fields) Secret(name string) (string, bool) {
	if f.sink.secret == nil {
		return "", false
	}
	return f.sink.secret(name)
}

// ReadTLSWith sets how TLSFile reads files, for the whole tree f belongs
// to.
func (f *Fields) ReadTLSWith(read DataReader) {
	f.sink.readTLS = read
}

// MaxTLSFile bounds a CA bundle, certificate or key file.
const MaxTLSFile = 256 << 10

// TLSFile reads key as the name of a PEM file (a CA bundle, a client
// certificate or its key) and returns its bytes, read through the tree's
// TLS reader. They travel inside the params, never as a blob anyone could
// fetch: a key is a secret. Problems are recorded at key's line, and never
// quote the file.
func (f *Fields) TLSFile(key string) ([]byte, bool) {
	name, ok := f.String(key)
	if !ok {
		return nil, false
	}
	switch {
	case name == "":
		f.Errorf(key, "must name a PEM file")
		return nil, false
	case f.sink.readTLS == nil:
		f.Errorf(key, "file %q cannot be read here: TLS files are read where the job file is parsed", truncate(name, 80))
		return nil, false
	}
	b, err := f.sink.readTLS(name)
	switch {
	case err != nil:
		f.Errorf(key, "cannot read %s file: %v", key, err)
		return nil, false
	case len(b) > MaxTLSFile:
		f.Errorf(key, "file %q is more than %d bytes", truncate(name, 80), MaxTLSFile)
		return nil, false
	}
	return b, true
}

// smallFile reads a file the job file names under key, through the reader
// of TLS files (read where the job file is parsed, sent beside it, carried
// in the params): what is described as what in messages.
func (f *Fields) smallFile(key, name, what string, limit int) ([]byte, bool) {
	switch {
	case name == "":
		f.Errorf(key, "must name %s", what)
		return nil, false
	case f.sink.readTLS == nil:
		f.Errorf(key, "file %q cannot be read here: it is read where the job file is parsed", truncate(name, 80))
		return nil, false
	}
	b, err := f.sink.readTLS(name)
	switch {
	case err != nil:
		f.Errorf(key, "cannot read %s: %v", what, err)
		return nil, false
	case len(b) > limit:
		f.Errorf(key, "file %q is more than %d bytes", truncate(name, 80), limit)
		return nil, false
	}
	return b, true
}

// DataBlobsWith sets which data files travel as blobs, for the whole tree
// f belongs to: blobOf returns a file's hex SHA-256, by the name the job
// file uses.
func (f *Fields) DataBlobsWith(blobOf func(name string) (string, bool)) {
	f.sink.blobOf = blobOf
}

// DataBlob is the blob a data file read by DataFile was uploaded as.
func (f *Fields) DataBlob(name string) (string, bool) {
	if f.sink.blobOf == nil {
		return "", false
	}
	return f.sink.blobOf(name)
}

// HasProblems reports whether anything in the tree f belongs to has a
// problem recorded so far (unknown keys are only found by Finish).
func (f *Fields) HasProblems() bool { return len(f.sink.problems) > 0 }

// Path is the mapping's field path, e.g. "workflows[0]".
func (f *Fields) Path() string { return f.path }

// Line is the mapping's first line.
func (f *Fields) Line() int { return f.line }

// find returns key's field, marking it known.
func (f *Fields) find(key string) (Field, bool) {
	if !slices.Contains(f.asked, key) {
		f.asked = append(f.asked, key)
	}
	if f.node == nil {
		return Field{}, false
	}
	for _, fl := range f.node.Fields {
		if fl.Key == key {
			f.used[key] = true
			return fl, true
		}
	}
	return Field{}, false
}

// lookup returns key's field if it holds a usable value. An explicit null
// reads as absent, as it does for JSON clients that send every optional
// field.
func (f *Fields) lookup(key string) (Field, bool) {
	fl, ok := f.find(key)
	if !ok || fl.Value.isNull() {
		return Field{}, false
	}
	if fl.Value.Invalid {
		f.sink.parsePaths[JoinPath(f.path, key)] = true
		return Field{}, false
	}
	return fl, true
}

// Has reports whether key is present (and not null), marking it known.
func (f *Fields) Has(key string) bool {
	fl, ok := f.find(key)
	return ok && !fl.Value.isNull()
}

// Node returns key's raw value, marking it known.
func (f *Fields) Node(key string) (*Node, bool) {
	fl, ok := f.lookup(key)
	return fl.Value, ok
}

// Required records "is required" for each key that is absent.
func (f *Fields) Required(keys ...string) {
	if f.bad {
		return
	}
	for _, k := range keys {
		if !f.Has(k) {
			f.Errorf(k, "is required")
		}
	}
}

// Skip marks every key as known without reading it: for a workflow whose
// type is unknown, where listing its keys as unknown would only be noise.
func (f *Fields) Skip() {
	if f.node == nil {
		return
	}
	for _, fl := range f.node.Fields {
		f.used[fl.Key] = true
	}
}

// String reads a scalar as a string. Numbers and booleans are taken as
// written, since header values and names are often numeric.
func (f *Fields) String(key string) (string, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return "", false
	}
	if fl.Value.Kind != ScalarNode {
		f.typeError(fl, "a string")
		return "", false
	}
	if s, isStr := fl.Value.Value.(string); isStr {
		return s, true
	}
	return fl.Value.Text, true
}

// Int reads an integer. A float with no fractional part is accepted because
// some JSON encoders write 8 as 8.0; a quoted number is not.
func (f *Fields) Int(key string) (int64, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return 0, false
	}
	v, ok := nodeInt(fl.Value)
	if !ok {
		f.typeError(fl, "an integer")
	}
	return v, ok
}

func nodeInt(n *Node) (int64, bool) {
	if n == nil || n.Kind != ScalarNode {
		return 0, false
	}
	switch v := n.Value.(type) {
	case int64:
		return v, true
	case float64:
		if v == math.Trunc(v) && v >= math.MinInt64 && v < math.MaxInt64 {
			return int64(v), true
		}
	}
	return 0, false
}

// Float reads a number; integers are accepted (rate: 200).
func (f *Fields) Float(key string) (float64, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return 0, false
	}
	if fl.Value.Kind == ScalarNode {
		switch v := fl.Value.Value.(type) {
		case int64:
			return float64(v), true
		case float64:
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				return v, true
			}
		}
	}
	f.typeError(fl, "a number")
	return 0, false
}

// Bool reads true or false; a quoted "true" is not a boolean.
func (f *Fields) Bool(key string) (bool, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return false, false
	}
	if b, isBool := fl.Value.Value.(bool); fl.Value.Kind == ScalarNode && isBool {
		return b, true
	}
	f.typeError(fl, "true or false")
	return false, false
}

// Duration reads a Go duration string such as "5s" or "1m30s". A bare number
// is refused: "duration: 5" could mean seconds or milliseconds.
func (f *Fields) Duration(key string) (time.Duration, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return 0, false
	}
	s, isStr := fl.Value.Value.(string)
	if fl.Value.Kind != ScalarNode || !isStr {
		f.problemAt(fl.Line, JoinPath(f.path, key),
			fmt.Sprintf("must be a duration such as \"5s\" or \"1m30s\", got %s", describe(fl.Value)))
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		f.problemAt(fl.Line, JoinPath(f.path, key),
			fmt.Sprintf("must be a duration such as \"5s\" or \"1m30s\", got %q", s))
		return 0, false
	}
	return d, true
}

// StringMap reads a mapping of scalars, such as HTTP headers.
func (f *Fields) StringMap(key string) (map[string]string, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return nil, false
	}
	if fl.Value.Kind != MapNode {
		f.typeError(fl, "a mapping")
		return nil, false
	}
	m := make(map[string]string, len(fl.Value.Fields))
	good := true
	for _, e := range fl.Value.Fields {
		if e.Value != nil && e.Value.Invalid {
			good = false
			continue
		}
		if e.Value == nil || e.Value.Kind != ScalarNode || e.Value.Value == nil {
			f.problemAt(e.Line, JoinPath(JoinPath(f.path, key), e.Key),
				fmt.Sprintf("must be a string, got %s", describe(e.Value)))
			good = false
			continue
		}
		if s, isStr := e.Value.Value.(string); isStr {
			m[e.Key] = s
		} else {
			m[e.Key] = e.Value.Text
		}
	}
	return m, good
}

// IntList reads one integer or a list of them (expect_status: 200 and
// expect_status: [200, 204] both work).
func (f *Fields) IntList(key string) ([]int64, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return nil, false
	}
	if fl.Value.Kind == ScalarNode {
		v, ok := nodeInt(fl.Value)
		if !ok {
			f.typeError(fl, "an integer or a list of integers")
			return nil, false
		}
		return []int64{v}, true
	}
	if fl.Value.Kind != ListNode {
		f.typeError(fl, "an integer or a list of integers")
		return nil, false
	}
	out := make([]int64, 0, len(fl.Value.Items))
	good := true
	for i, it := range fl.Value.Items {
		if it != nil && it.Invalid {
			good = false
			continue
		}
		v, ok := nodeInt(it)
		if !ok {
			f.problemAt(lineOf(it, fl.Line), IndexPath(JoinPath(f.path, key), i),
				fmt.Sprintf("must be an integer, got %s", describe(it)))
			good = false
			continue
		}
		out = append(out, v)
	}
	return out, good
}

// StringList reads a list of scalars as strings.
func (f *Fields) StringList(key string) ([]string, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return nil, false
	}
	if fl.Value.Kind != ListNode {
		f.typeError(fl, "a list of strings")
		return nil, false
	}
	out := make([]string, 0, len(fl.Value.Items))
	good := true
	for i, it := range fl.Value.Items {
		if it != nil && it.Invalid {
			good = false
			continue
		}
		if it == nil || it.Kind != ScalarNode || it.Value == nil {
			f.problemAt(lineOf(it, fl.Line), IndexPath(JoinPath(f.path, key), i),
				fmt.Sprintf("must be a string, got %s", describe(it)))
			good = false
			continue
		}
		if s, isStr := it.Value.(string); isStr {
			out = append(out, s)
		} else {
			out = append(out, it.Text)
		}
	}
	return out, good
}

// Objects reads a list of mappings (workflows, steps); each item gets its
// own Fields with an indexed path such as "steps[1]".
func (f *Fields) Objects(key string) ([]*Fields, bool) {
	fl, ok := f.lookup(key)
	if !ok {
		return nil, false
	}
	if fl.Value.Kind != ListNode {
		f.typeError(fl, "a list")
		return nil, false
	}
	out := make([]*Fields, len(fl.Value.Items))
	for i, it := range fl.Value.Items {
		out[i] = newFields(IndexPath(JoinPath(f.path, key), i), it, lineOf(it, fl.Line), f.sink)
	}
	return out, true
}

// Object reads a nested mapping (data: {file: ..., mode: ...}) with its own
// Fields. A value that is not a mapping is reported, and still returned
// (reading as empty) with ok true, so that callers know the key was given.
func (f *Fields) Object(key string) (*Fields, bool) {
	fl, ok := f.find(key)
	if !ok || fl.Value.isNull() {
		return nil, false
	}
	return newFields(JoinPath(f.path, key), fl.Value, fl.Line, f.sink), true
}

// DataFile reads key as the name of a data file and returns the name and
// the file's text, read through the tree's DataReader. Problems (no
// reader, unreadable, not UTF-8, past MaxDataSize for the whole job file)
// are recorded at key's line.
func (f *Fields) DataFile(key string) (name, text string, ok bool) {
	name, ok = f.String(key)
	if !ok {
		return "", "", false
	}
	s := f.sink
	switch {
	case name == "":
		f.Errorf(key, "must name a data file")
		return "", "", false
	case s.readData == nil:
		f.Errorf(key, "data file %q cannot be read here: data files are read where the job file is parsed", truncate(name, 80))
		return "", "", false
	}
	b, err := s.readData(name)
	switch {
	case err != nil:
		f.Errorf(key, "cannot read data file: %v", err)
		return "", "", false
	case len(b) > MaxDataSize-s.dataBytes:
		if s.dataBytes == 0 {
			f.Errorf(key, "data file %q is %d bytes, more than the %d allowed", truncate(name, 80), len(b), MaxDataSize)
		} else {
			f.Errorf(key, "data file %q is %d bytes, which with the job file's other data files (%d bytes) is more than the %d allowed",
				truncate(name, 80), len(b), s.dataBytes, MaxDataSize)
		}
		return "", "", false
	case !utf8.Valid(b):
		f.Errorf(key, "data file %q is not UTF-8 text", truncate(name, 80))
		return "", "", false
	}
	s.dataBytes += len(b)
	return name, string(b), true
}

// Errorf records a problem with key, at the key's line (or the mapping's
// when the key is absent).
func (f *Fields) Errorf(key, format string, args ...any) {
	line := f.line
	if f.node != nil {
		for _, fl := range f.node.Fields {
			if fl.Key == key {
				line = fl.Line
				break
			}
		}
	}
	f.problemAt(line, JoinPath(f.path, key), fmt.Sprintf(format, args...))
}

// Problemf records a problem with the mapping as a whole.
func (f *Fields) Problemf(format string, args ...any) {
	f.problemAt(f.line, f.path, fmt.Sprintf(format, args...))
}

// Report records a validation error. FieldErrors are placed at the lines
// their paths point to. A complaint about a field that already has a
// reading problem (or sits inside one) is dropped: it would be about the
// zero value the failed read left behind.
func (f *Fields) Report(err error) {
	if err == nil {
		return
	}
	var fes FieldErrors
	if !errors.As(err, &fes) {
		f.Problemf("%v", err)
		return
	}
	for _, fe := range fes {
		abs := f.path
		switch {
		case fe.Path == "":
		case strings.HasPrefix(fe.Path, "["):
			abs += fe.Path
		case abs == "":
			abs = fe.Path
		default:
			abs += "." + fe.Path
		}
		if f.shadowed(abs) {
			continue
		}
		f.sink.problems = append(f.sink.problems, Problem{Line: f.lineOf(fe.Path), Path: abs, Message: fe.Message})
	}
}

// Encode validates p, reports its problems, and returns p as CBOR for
// wire.WorkflowSpec.Params. The bytes are meaningless when problems were
// recorded.
func (f *Fields) Encode(p Params) []byte {
	f.Report(p.Validate())
	b, err := wire.Marshal(p)
	if err != nil {
		f.Problemf("encode params: %v", err)
		return nil
	}
	return b
}

// Finish reports every key no reader asked for, across the whole tree, and
// returns all problems sorted by line. Call it once, after every reader.
func (f *Fields) Finish() []Problem {
	s := f.sink
	for _, o := range s.objects {
		if o.node == nil {
			continue
		}
		for _, fl := range o.node.Fields {
			if o.used[fl.Key] {
				continue
			}
			msg := fmt.Sprintf("unknown key %q", truncate(fl.Key, 64))
			if s.guesses < maxGuesses {
				s.guesses++
				if guess := closest(fl.Key, o.asked); guess != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", guess)
				}
			}
			s.problems = append(s.problems, Problem{Line: fl.Line, Path: o.path, Message: msg})
		}
		o.used = map[string]bool{}
		for _, fl := range o.node.Fields {
			o.used[fl.Key] = true // a second Finish must not repeat them
		}
	}
	out := slices.Clone(s.problems)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

func (f *Fields) typeError(fl Field, want string) {
	f.problemAt(fl.Line, JoinPath(f.path, fl.Key), fmt.Sprintf("must be %s, got %s", want, describe(fl.Value)))
}

func (f *Fields) problemAt(line int, path, msg string) {
	f.sink.problems = append(f.sink.problems, Problem{Line: line, Path: path, Message: msg})
	f.sink.parsePaths[path] = true
}

// shadowed reports whether abs or a field containing it had a reading
// problem, walking up the path rather than scanning every problem.
func (f *Fields) shadowed(abs string) bool {
	for p := abs; ; {
		if f.sink.parsePaths[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return p != "" && f.sink.parsePaths[""]
		}
		p = p[:i]
	}
}

// lineOf finds the line a relative path points to, falling back to the
// deepest node that exists (a missing key is reported at its mapping).
func (f *Fields) lineOf(rel string) int {
	line := f.line
	n := f.node
	for _, el := range splitPath(rel) {
		if n == nil {
			break
		}
		var next *Node
		if el.key != nil && n.Kind == MapNode {
			for _, fl := range n.Fields {
				if fl.Key == *el.key {
					line, next = fl.Line, fl.Value
					break
				}
			}
		} else if el.key == nil && n.Kind == ListNode && el.index < len(n.Items) {
			next = n.Items[el.index]
			line = lineOf(next, line)
		}
		if next == nil {
			break
		}
		n = next
	}
	return line
}

func lineOf(n *Node, fallback int) int {
	if n == nil || n.Line == 0 {
		return fallback
	}
	return n.Line
}

// describe names a value for "got ..." in messages.
func describe(n *Node) string {
	if n == nil {
		return "nothing"
	}
	if n.Kind != ScalarNode {
		return n.Kind.String()
	}
	switch v := n.Value.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(truncate(v, 40))
	default:
		return truncate(n.Text, 40)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Paths use job-file spelling: keys joined by dots, list indexes in
// brackets, and keys that are not plain words quoted in brackets
// (headers["X-Trace.Id"]), so a path can be walked back to its line.

// JoinPath appends a mapping key to a field path.
func JoinPath(base, key string) string {
	if !plainKey(key) {
		return base + "[" + strconv.Quote(key) + "]"
	}
	if base == "" {
		return key
	}
	return base + "." + key
}

// IndexPath appends a list index to a field path.
func IndexPath(base string, i int) string {
	return base + "[" + strconv.Itoa(i) + "]"
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

type pathElem struct {
	key   *string
	index int
}

// splitPath parses what joinPath and indexPath build; anything else ends
// the walk early, which only costs line precision.
func splitPath(p string) []pathElem {
	var out []pathElem
	for p != "" {
		switch p[0] {
		case '.':
			p = p[1:]
		case '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return out
			}
			inner := p[1:end]
			if strings.HasPrefix(inner, `"`) {
				// A quoted key may itself contain ']': find the closing quote.
				q, err := strconv.QuotedPrefix(p[1:])
				if err != nil || len(p) < 2+len(q) || p[1+len(q)] != ']' {
					return out
				}
				k, _ := strconv.Unquote(q)
				out = append(out, pathElem{key: &k})
				p = p[2+len(q):]
				continue
			}
			i, err := strconv.Atoi(inner)
			if err != nil {
				return out
			}
			out = append(out, pathElem{index: i})
			p = p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			k := p[:end]
			out = append(out, pathElem{key: &k})
			p = p[end:]
		}
	}
	return out
}

// closest suggests a known key within two edits of a misspelt one.
func closest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 || len(a)-len(b) > 2 || len(b)-len(a) > 2 {
		return math.MaxInt // too long to bother, or too different to be a typo
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
