package obs

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/transport"
)

// Role is what a leading role (the gate, the manager) publishes the same
// way, every value read at scrape time: tempest_<Name>_is_leader,
// tempest_<Name>_term, tempest_<Name>_jobs{status}, the live numbers and
// latency histograms of its running jobs while it leads (a follower's would
// be stale), and its transport's counters. The role adds its own series.
type Role struct {
	// Name is the series' prefix after "tempest_": "gate", "manager".
	Name string
	// Leads ends the is_leader help: "1 if this <Name> leads <Leads>."
	Leads string
	// Own declares the role's other series; Scrape sends them.
	Own []*prometheus.Desc
	// Scrape reads the role once per scrape: it sends the role's own series
	// to ch and returns the values of the shared ones.
	Scrape func(ch chan<- prometheus.Metric) RoleState
	// Transport is the role's transport at scrape time.
	Transport func() transport.Transport

	// Live builds the series of the jobs still running while the role
	// leads, and nothing otherwise (a follower's numbers would be stale).
	// It is called only by scrapes that want job series.
	Live func() []JobSeries
}

// RoleState is one scrape's reading of the shared series.
type RoleState struct {
	Leading bool
	Term    uint64
	// Jobs counts the jobs the role knows by status.
	Jobs map[string]float64
}

// Register declares r's series in reg, with the transport's counters, and
// its live job series in reg's job part when reg is a Registry. A second
// registration of one role in one registry is refused.
func (r Role) Register(reg prometheus.Registerer) error {
	leader := prometheus.NewDesc("tempest_"+r.Name+"_is_leader", fmt.Sprintf("1 if this %s leads %s.", r.Name, r.Leads), nil, nil)
	term := prometheus.NewDesc("tempest_"+r.Name+"_term", fmt.Sprintf("Election term this %s is in.", r.Name), nil, nil)
	jobs := prometheus.NewDesc("tempest_"+r.Name+"_jobs", fmt.Sprintf("Jobs known to this %s by status.", r.Name), []string{"status"}, nil)
	live := NewJobMetrics()
	descs := append([]*prometheus.Desc{leader, term, jobs}, r.Own...)
	own := NewCollector(func(ch chan<- prometheus.Metric) {
		st := r.Scrape(ch)
		Gauge(ch, leader, Bool(st.Leading))
		Gauge(ch, term, float64(st.Term))
		for status, n := range st.Jobs {
			Gauge(ch, jobs, n, status)
		}
	}, descs...)
	if err := Register(reg, own, NewTransportCollector(r.Transport)); err != nil {
		return err
	}
	if r.Live == nil {
		return nil
	}
	return Register(jobsRegisterer(reg), NewCollector(func(ch chan<- prometheus.Metric) {
		live.Collect(ch, r.Live())
	}, live.Descs()...))
}
