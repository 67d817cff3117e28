// Package checker judges the history of a fault-injection run against the
// promise Tempest makes its users: every acknowledged submission ends
// exactly once, with the request counts the target itself saw; a refused
// submission never runs; no term has two leaders; fence tokens only grow.
//
// A run records into a History as it goes (every submit with its answer,
// every status it polled, every leader and term, every fence token it saw,
// and at the end the target's exact count per job); Check then gives the
// verdict. The History knows nothing of clusters or HTTP, so the rules are
// tested on hand-written histories, including ones they must reject.
package checker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Answer is what the client was told about a submission.
type Answer string

const (
	// Acked: the cluster answered with a job id; the job must end once.
	Acked Answer = "acked"
	// Refused: the cluster said the job will not run; it must not.
	Refused Answer = "refused"
	// Unknown: no answer, or one that does not say (timeout, dropped
	// connection, internal error); the job may run, at most once.
	Unknown Answer = "unknown"
)

// Submit is one submission and its answer.
type Submit struct {
	// Key names the submission's own target counter: each job loads a
	// target (or a path) no other job touches.
	Key    string
	JobID  string // "" when the answer carried none
	Answer Answer
	Detail string // the error, for Refused and Unknown
	At     time.Time
	Took   time.Duration // from the request to its answer (or the client giving up)
}

// Status is one poll of a job's status.
type Status struct {
	JobID    string
	Status   string // the API's job status (QUEUED, RUNNING, COMPLETED, ...)
	Terminal bool
	NotFound bool  // the cluster answered that it has no such job
	Requests int64 // completed + failed requests the cluster reports
	At       time.Time
}

// Leader is one node saying it leads its group in a term.
type Leader struct {
	Group string // "gates", or a datacenter's name for its managers
	Node  string
	Term  uint64
	At    time.Time
}

// Fence is one fence token seen for a job in a datacenter.
type Fence struct {
	JobID, Datacenter string
	Token             uint64
	At                time.Time
}

// History is a run's record. Its methods are safe for concurrent use.
type History struct {
	mu       sync.Mutex
	submits  []Submit
	statuses []Status
	leaders  []Leader
	terms    map[string][]uint64 // node → terms in the order seen
	fences   []Fence
	counts   map[string]uint64 // target's requests by Key
}

// New returns an empty history.
func New() *History {
	return &History{terms: map[string][]uint64{}, counts: map[string]uint64{}}
}

// AddSubmit records a submission's answer.
func (h *History) AddSubmit(s Submit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.submits = append(h.submits, s)
}

// AddStatus records one status poll.
func (h *History) AddStatus(s Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.statuses = append(h.statuses, s)
}

// AddTerm records the term a node said it is in, leading or not; with
// leading, it is also a Leader observation for group.
func (h *History) AddTerm(group, node string, term uint64, leading bool, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.terms[node] = append(h.terms[node], term)
	if leading {
		h.leaders = append(h.leaders, Leader{Group: group, Node: node, Term: term, At: at})
	}
}

// AddFence records a fence token seen for a job in a datacenter.
func (h *History) AddFence(f Fence) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fences = append(h.fences, f)
}

// SetTargetCount records the target's final request count for a key.
func (h *History) SetTargetCount(key string, n uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[key] = n
}

// Submits returns the submissions recorded so far.
func (h *History) Submits() []Submit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.submits)
}

// Leaders returns every leader observation.
func (h *History) Leaders() []Leader {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.leaders)
}

// Rules tune the verdict.
type Rules struct {
	// MaxExtra is how many requests per job the target may have seen
	// beyond the job's reported counts without it counting as a
	// violation: the load a worker cut off from its managers may send
	// before it fences itself. Extra requests are reported either way.
	MaxExtra uint64
}

// Violation is one broken rule.
type Violation struct {
	Rule   string // lost, ended-twice, resurrected, count-mismatch, refused-ran, two-leaders, term-regressed, fence-regressed
	Job    string // the submission's key, or the group for leader rules
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Rule, v.Job, v.Detail) }

// Verdict is the outcome of Check.
type Verdict struct {
	Acked, Refused, Unknown int
	// Lost: acknowledged jobs that never ended (or were forgotten).
	// Duplicated: acknowledged jobs that ended twice with different
	// outcomes or whose target saw more requests than they report.
	Lost, Duplicated int
	// Extra is the requests targets saw beyond what jobs reported, summed.
	Extra uint64
	// UnknownRan counts submissions with an unknown answer and no job id
	// whose target saw requests: they ran, and the client cannot tell
	// (only an idempotent retry would find them).
	UnknownRan int
	// Leaders is how many distinct (group, term) leaders were seen.
	Leaders    int
	Violations []Violation
}

// OK says whether no rule was broken.
func (v Verdict) OK() bool { return len(v.Violations) == 0 }

func (v Verdict) String() string {
	var b strings.Builder
	verdict := "PASS"
	if !v.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "%s: %d acked, %d refused, %d unknown (%d of them ran); %d lost, %d duplicated, %d extra requests; %d leaders seen",
		verdict, v.Acked, v.Refused, v.Unknown, v.UnknownRan, v.Lost, v.Duplicated, v.Extra, v.Leaders)
	for _, x := range v.Violations {
		b.WriteString("\n  ")
		b.WriteString(x.String())
	}
	return b.String()
}

// Check judges the history.
func (h *History) Check(r Rules) Verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	var v Verdict
	byJob := map[string][]Status{}
	for _, s := range h.statuses {
		byJob[s.JobID] = append(byJob[s.JobID], s)
	}
	for _, sts := range byJob {
		slices.SortStableFunc(sts, func(a, b Status) int { return a.At.Compare(b.At) })
	}
	for _, s := range h.submits {
		switch s.Answer {
		case Acked:
			v.Acked++
			h.checkAcked(&v, r, s, byJob[s.JobID])
		case Refused:
			v.Refused++
			if n := h.counts[s.Key]; n > 0 {
				v.add("refused-ran", s.Key, "refused (%s), but the target saw %d requests", s.Detail, n)
			}
			if s.JobID != "" {
				for _, st := range byJob[s.JobID] {
					if !st.NotFound {
						v.add("refused-ran", s.Key, "refused, but job %s was seen %s", s.JobID, st.Status)
						break
					}
				}
			}
		default:
			v.Unknown++
			// An unknown answer promises nothing but at most once; with an
			// id the job can be judged like an acknowledged one if it ran.
			if sts := byJob[s.JobID]; s.JobID != "" && slices.ContainsFunc(sts, func(st Status) bool { return st.Terminal }) {
				h.checkAcked(&v, r, s, sts)
			} else if s.JobID == "" && h.counts[s.Key] > 0 {
				v.UnknownRan++
			}
		}
	}
	h.checkLeaders(&v)
	h.checkFences(&v)
	return v
}

func (h *History) checkAcked(v *Verdict, r Rules, s Submit, sts []Status) {
	// first and last are the first and the latest terminal observations:
	// the job ended at first; last is what the user is left with.
	var first, last *Status
	twice, resurrected := false, false
	for i := range sts {
		st := &sts[i]
		switch {
		case st.Terminal && first == nil:
			first, last = st, st
		case st.Terminal:
			if !twice && (st.Status != first.Status || st.Requests != first.Requests) {
				twice = true
				v.add("ended-twice", s.Key, "job %s ended %s with %d requests, later %s with %d", s.JobID, first.Status, first.Requests, st.Status, st.Requests)
			}
			last = st
		case first != nil && st.NotFound:
			v.Lost++
			v.add("lost", s.Key, "job %s ended %s, later the cluster did not know it", s.JobID, first.Status)
			return
		case first != nil && !resurrected:
			// The user saw the job end, then saw it running again: a stale
			// status served after a failover, or a second run.
			resurrected = true
			v.add("resurrected", s.Key, "job %s ended %s, later seen %s again", s.JobID, first.Status, st.Status)
		}
	}
	if first == nil {
		v.Lost++
		last := "never polled"
		if len(sts) > 0 {
			l := sts[len(sts)-1]
			last = "last seen " + l.Status
			if l.NotFound {
				last = "the cluster answered not found"
			}
		}
		v.add("lost", s.Key, "acknowledged job %s never ended (%s); its target saw %d requests", s.JobID, last, h.counts[s.Key])
		return
	}
	final := last
	seen, ok := h.counts[s.Key]
	if !ok {
		v.add("count-mismatch", s.Key, "no target count recorded for job %s", s.JobID)
		return
	}
	reported := uint64(max(final.Requests, 0))
	switch {
	case seen > reported:
		extra := seen - reported
		v.Extra += extra
		twice = true
		if extra > r.MaxExtra {
			v.add("count-mismatch", s.Key, "job %s reports %d requests, the target saw %d (%d extra, %d allowed): load ran twice or unreported",
				s.JobID, reported, seen, extra, r.MaxExtra)
		}
	case seen < reported:
		v.add("count-mismatch", s.Key, "job %s reports %d requests, the target saw only %d", s.JobID, reported, seen)
	}
	if twice {
		v.Duplicated++
	}
}

func (h *History) checkLeaders(v *Verdict) {
	type gt struct {
		group string
		term  uint64
	}
	who := map[gt]map[string]bool{}
	for _, l := range h.leaders {
		k := gt{l.Group, l.Term}
		if who[k] == nil {
			who[k] = map[string]bool{}
		}
		who[k][l.Node] = true
	}
	v.Leaders = len(who)
	keys := slices.SortedFunc(maps.Keys(who), func(a, b gt) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.term, b.term))
	})
	for _, k := range keys {
		if len(who[k]) > 1 {
			v.add("two-leaders", k.group, "term %d led by %s", k.term, strings.Join(slices.Sorted(maps.Keys(who[k])), " and "))
		}
	}
	for _, node := range slices.Sorted(maps.Keys(h.terms)) {
		terms := h.terms[node]
		for i := 1; i < len(terms); i++ {
			if terms[i] < terms[i-1] {
				v.add("term-regressed", node, "term %d after %d", terms[i], terms[i-1])
				break
			}
		}
	}
}

func (h *History) checkFences(v *Verdict) {
	type jd struct{ job, dc string }
	last := map[jd]uint64{}
	reported := map[jd]bool{}
	for _, f := range h.fences {
		k := jd{f.JobID, f.Datacenter}
		if prev, ok := last[k]; ok && f.Token < prev && !reported[k] {
			reported[k] = true
			v.add("fence-regressed", f.JobID, "%s: token %#x after %#x", f.Datacenter, f.Token, prev)
		}
		last[k] = max(last[k], f.Token)
	}
}

func (v *Verdict) add(rule, job, format string, args ...any) {
	v.Violations = append(v.Violations, Violation{Rule: rule, Job: job, Detail: fmt.Sprintf(format, args...)})
}
