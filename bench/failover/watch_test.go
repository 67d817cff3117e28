package main

import (
	"encoding/json"
	"testing"
)

// The watch's totals are summed over trials (counts add, the longest stall
// and quiet spell win) and stay flat keys of a trial's and the summary's
// JSON, which runs written before they shared a type also have.
func TestWatchTotalsSumAndStayFlat(t *testing.T) {
	trials := []TrialResult{
		{watchTotals: watchTotals{Stalls: 2, MaxStall: &WatchInfo{GapMS: 400}, Quiets: 1, MaxQuietMS: 1300, UDPRcvbuf: 1}},
		{watchTotals: watchTotals{Stalls: 3, MaxStall: &WatchInfo{GapMS: 900}, Quiets: 2, MaxQuietMS: 1200, UDPInErrors: 4}},
		{},
	}
	s := summarizeTrials(trials)
	want := watchTotals{Stalls: 5, MaxStall: trials[1].MaxStall, Quiets: 3, MaxQuietMS: 1300, UDPRcvbuf: 1, UDPInErrors: 4}
	if s.watchTotals != want {
		t.Fatalf("summed %+v, want %+v", s.watchTotals, want)
	}
	for _, v := range []any{trials[0], s} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"stalls", "max_stall", "quiets", "max_quiet_ms", "udp_rcvbuf_errors", "udp_in_errors"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%T JSON lacks %q: %s", v, k, b)
			}
		}
	}
}
