package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rates(rs []*runResult) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, r.rate())
	}
	return out
}

func totalCPU(r *runResult) time.Duration {
	var t time.Duration
	for _, d := range r.cpu {
		t += d
	}
	return t
}

// usPerRecord is CPU microseconds per input record.
func usPerRecord(d time.Duration, records int) float64 {
	return float64(d.Microseconds()) / float64(records)
}

func report(o options, kinds []string, results map[string][]*runResult) {
	fmt.Printf("\n== end to end, %d records, medians of %d interleaved reps (%s)\n", o.records, o.reps, strings.Join(kinds, " "))
	fmt.Printf("%-4s %3s %10s %12s %10s  %s\n", "kind", "ok", "wall", "records/s", "cpu µs/rec", "records/s per rep")
	for _, k := range kinds {
		rs := results[k]
		var walls, cpus []float64
		var per []string
		for _, r := range rs {
			walls = append(walls, r.wall.Seconds())
			cpus = append(cpus, usPerRecord(totalCPU(r), r.records))
			per = append(per, fmt.Sprintf("%.0f", r.rate()))
		}
		fmt.Printf("%-4s %3d %9.2fs %12.0f %10.2f  %s\n", k, len(rs), median(walls), median(rates(rs)), median(cpus), strings.Join(per, " "))
	}

	if rs := results["alo"]; len(rs) > 0 {
		var ex []string
		for _, r := range rs {
			ex = append(ex, fmt.Sprintf("%d (%.1f%%)", r.excess, 100*float64(r.excess)/float64(r.records)))
		}
		fmt.Printf("alo counted records more than once (no fault injected), per rep: %s\n", strings.Join(ex, ", "))
	}

	for _, k := range []string{"eo", "alo"} {
		rs := results[k]
		if len(rs) == 0 {
			continue
		}
		fmt.Printf("\n== CPU µs per record by process, %s (median of reps; the leader is the manager leading during the run)\n", k)
		byRole := map[string][]float64{}
		names := map[string]bool{}
		for _, r := range rs {
			roles := map[string]time.Duration{}
			for name, d := range r.cpu {
				names[name] = true
				roles[role(name)] += d
			}
			for rl, d := range roles {
				byRole[rl] = append(byRole[rl], usPerRecord(d, r.records))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			var xs []float64
			for _, r := range rs {
				if d, ok := r.cpu[name]; ok {
					xs = append(xs, usPerRecord(d, r.records))
				}
			}
			fmt.Printf("  %-14s %7.2f  (%d reps)\n", name, median(xs), len(xs))
		}
		for _, rl := range slices.Sorted(maps.Keys(byRole)) {
			fmt.Printf("  all %-10s %7.2f\n", rl, median(byRole[rl]))
		}
	}

	eo, alo, mlr := results["eo"], results["alo"], results["mlr"]
	fmt.Println("\n== ratios (medians; paired = median over reps of the ratio within the rep)")
	if len(eo) > 0 && len(alo) > 0 {
		wallRatio := median(walls(eo)) / median(walls(alo))
		cpuRatio := median(cpuPer(eo)) / median(cpuPer(alo))
		fmt.Printf("EO/ALO cost: wall %.2f× (paired %.2f×), CPU %.2f× (paired %.2f×)   aim ≤ 1.5×: wall %s, CPU %s\n",
			wallRatio, pairedRatio(eo, alo, func(r *runResult) float64 { return r.wall.Seconds() }),
			cpuRatio, pairedRatio(eo, alo, func(r *runResult) float64 { return totalCPU(r).Seconds() }),
			verdict(wallRatio <= 1.5), verdict(cpuRatio <= 1.5))
	}
	if len(eo) > 0 {
		r := median(rates(eo))
		fmt.Printf("EO rate: %.0f records/s   aim ≥ 100000: %s\n", r, verdict(r >= 100_000))
	}
	if len(eo) > 0 && len(mlr) > 0 {
		ratio := median(rates(eo)) / median(rates(mlr))
		fmt.Printf("EO/Miller rate: %.2f× (paired %.2f×)   aim ≥ 0.4×: %s\n", ratio,
			pairedRatio(eo, mlr, func(r *runResult) float64 { return r.rate() }), verdict(ratio >= 0.4))
	}
	if gor := results["go"]; len(gor) > 0 && len(mlr) > 0 {
		fmt.Printf("Miller/Go floor rate: %.2f×\n", median(rates(mlr))/median(rates(gor)))
	}
}

func role(name string) string {
	switch {
	case strings.HasPrefix(name, "leader "):
		return "leader"
	case name == "cli", name == "mlr", name == "go":
		return name
	case strings.Contains(name, "manager"):
		return "managers"
	case strings.Contains(name, "worker"):
		return "workers"
	}
	return name
}

func walls(rs []*runResult) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, r.wall.Seconds())
	}
	return out
}

func cpuPer(rs []*runResult) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, usPerRecord(totalCPU(r), r.records))
	}
	return out
}

func pairedRatio(a, b []*runResult, f func(*runResult) float64) float64 {
	var xs []float64
	for i := range min(len(a), len(b)) {
		xs = append(xs, f(a[i])/f(b[i]))
	}
	return median(xs)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
