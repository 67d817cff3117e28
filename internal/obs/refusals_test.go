package obs

import (
	"testing"
	"time"
)

// Every refusal is counted, but a flood of them logs one line per type a
// second, naming how many went unlogged.
func TestRefusalLogsArePaced(t *testing.T) {
	var c Refusals[string]
	now := time.Unix(0, 0)
	if log, _ := c.Add("open", now); !log {
		t.Fatal("the first refusal is not logged")
	}
	for i := range 100 {
		if log, _ := c.Add("open", now.Add(time.Duration(i)*time.Millisecond)); log {
			t.Fatalf("refusal %d within a second of the last line logged", i)
		}
	}
	if log, _ := c.Add("blob", now); !log {
		t.Fatal("another type's first refusal is not logged")
	}
	log, skipped := c.Add("open", now.Add(RefusalLogEvery))
	if !log || skipped != 100 {
		t.Fatalf("a second on: logged %v, naming %d unlogged; want 100", log, skipped)
	}
	if n := c.Snapshot()["open"]; n != 102 {
		t.Fatalf("counted %d, want 102", n)
	}
}
