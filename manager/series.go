package manager

import "tempest/wire"

// maxJobSeriesEntries bounds the per-second points one job-level message
// (a report to the gates, a status to the peers, a state sync page)
// carries over all its workflows: an hour of seconds for four workflows,
// about 400 KiB. A job of many workflows, each with up to an hour of
// points, would otherwise exceed the message cap on the series alone.
const maxJobSeriesEntries = 4 * wire.MaxSeriesEntries

// minSeriesEntries is the fewest points a workflow's series is thinned to.
const minSeriesEntries = 60

// fitJobSeries thins the workflows' series in jp so that together they stay
// within maxJobSeriesEntries: each keeps an even share, by keeping every
// k-th second (and the last). Each point still covers one second, so a
// chart reads the same rates, only at a coarser step; totals come from the
// counters, never from the series.
func fitJobSeries(jp *wire.JobProgress) {
	total, with := 0, 0
	for i := range jp.Workflows {
		if n := len(jp.Workflows[i].Series); n > 0 {
			total += n
			with++
		}
	}
	if total <= maxJobSeriesEntries {
		return
	}
	share := max(maxJobSeriesEntries/with, minSeriesEntries)
	for i := range jp.Workflows {
		jp.Workflows[i].Series = thinSeries(jp.Workflows[i].Series, share)
	}
}

// thinSeries returns at most limit points of s, evenly spaced, first and
// last kept. It never modifies s.
func thinSeries(s []wire.SecondStats, limit int) []wire.SecondStats {
	if len(s) <= limit || limit < 2 {
		return s
	}
	step := (len(s) + limit - 2) / (limit - 1)
	out := make([]wire.SecondStats, 0, limit)
	for i := 0; i < len(s)-1; i += step {
		out = append(out, s[i])
	}
	return append(out, s[len(s)-1])
}
