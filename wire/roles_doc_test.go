package wire

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// docs/security.md shows who may send what as a table; wire.MaySend is what
// the transport enforces. The two must say the same of every known type,
// so the doc is read here and compared cell by cell.
func TestSecurityDocMatchesMaySend(t *testing.T) {
	const worker, manager, cluster = 1, 2, 3
	cols := []struct {
		name      string
		peer, own uint8
	}{{"worker key → manager", worker, manager}, {"worker key → gate", worker, cluster}, {"manager key → gate", manager, cluster}}

	f, err := os.Open("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := map[MsgType][]bool{}
	byName := map[string]MsgType{}
	for i := range 1 << 16 {
		if mt := MsgType(i); mt.Known() {
			byName[mt.String()] = mt
		}
	}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "<!-- may-send table"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			if len(doc) > 0 {
				in = false
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) < 1+len(cols) || !strings.HasPrefix(cells[0], "`") {
			if cells[0] != "request" && !strings.HasPrefix(cells[0], "---") {
				t.Fatalf("unexpected row in the may-send table: %q", line)
			}
			if cells[0] == "request" {
				for i, c := range cols {
					if cells[1+i] != c.name {
						t.Fatalf("column %d is %q, want %q", 1+i, cells[1+i], c.name)
					}
				}
			}
			continue
		}
		name := strings.Trim(cells[0], "`")
		mt, ok := byName[name]
		if !ok {
			t.Fatalf("the doc's table names %q, which is no message type", name)
		}
		if _, dup := doc[mt]; dup {
			t.Fatalf("the doc's table lists %s twice", name)
		}
		row := make([]bool, len(cols))
		for i := range cols {
			switch cells[1+i] {
			case "yes":
				row[i] = true
			case "no":
			default:
				t.Fatalf("%s, %s: %q, want yes or no", name, cols[i].name, cells[1+i])
			}
		}
		doc[mt] = row
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(doc) == 0 {
		t.Fatal("docs/security.md has no may-send table")
	}
	for _, mt := range byName {
		row, listed := doc[mt]
		any := false
		for i, c := range cols {
			got := MaySend(c.peer, c.own, mt)
			any = any || got
			if listed && row[i] != got {
				t.Errorf("%s, %s: the doc says %v, MaySend says %v", mt, c.name, row[i], got)
			}
		}
		if any && !listed {
			t.Errorf("MaySend lets a lower tier send %s; the doc's table does not list it", mt)
		}
		if listed && !any {
			t.Errorf("the doc's table lists %s, which no lower tier may send", mt)
		}
	}
}
