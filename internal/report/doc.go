// Package report renders a job's results as one self-contained HTML file:
// a header (job, status, duration, totals, threshold verdicts) and, per
// workflow, throughput and latency over time, the latency distribution of
// each step, and the per-step summary table.
//
// The file needs nothing from the network: the charts are inline SVG drawn
// here in Go, the styles are inline, and there is no script at all. Every
// string from the job (names, errors, threshold expressions) goes through
// html/template, so a step named "<script>" is shown, never run.
//
// The package takes its own small view of a job (Job) rather than the api
// types: the api server calls Render, so report cannot import api (that
// would be an import cycle); api converts its Results into a Job.
package report
