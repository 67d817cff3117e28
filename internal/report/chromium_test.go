package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium runs the headless browser on page with extra flags; it skips
// when no browser is installed, unless CI is set (CI installs one, and a
// skipped check there proves nothing).
func chromium(t *testing.T, dir, page string, flags ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed, and CI must render the report headless")
		}
		t.Skip("chromium is not installed (command -v chromium): cannot render the report headless")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The extra flags keep a sandboxed machine's browser from reaching for
	// the network (updates, sync, QUIC probes) while it renders a local file.
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1000,2000"}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestRenderInChromium draws the report in a headless browser, which
// catches SVG or HTML a browser refuses but string checks do not.
func TestRenderInChromium(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	png := filepath.Join(dir, "report.png")
	var buf bytes.Buffer
	if err := Render(&buf, sampleJob(300, "<script>", "get /cart")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	chromium(t, dir, page, "--screenshot="+png)
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(b) < 1024 || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot is %d bytes and not a PNG", len(b))
	}
	// TEMPEST_REPORT_PNG=path keeps the screenshot for a person to look at.
	if keep := os.Getenv("TEMPEST_REPORT_PNG"); keep != "" {
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// layoutProbe is appended to a copy of the report (the report itself has
// no script) and writes what the browser laid out wrong into #probe: every
// SVG label that reaches outside its drawing or overlaps another label,
// and a page wider than the window (a table or chart cut off on the
// right).
const layoutProbe = `<pre id="probe">` + "\n" + `<script>
(function(){
  var out = [];
  document.querySelectorAll("svg").forEach(function(svg, i){
    var vb = svg.viewBox.baseVal;
    var boxes = [];
    svg.querySelectorAll("text").forEach(function(t){
      var b = t.getBBox();
      if (b.width === 0) return;
      var name = "chart " + i + " (" + svg.getAttribute("aria-label") + ") label " + JSON.stringify(t.textContent);
      if (b.x < vb.x - 0.5 || b.y < vb.y - 0.5 || b.x + b.width > vb.x + vb.width + 0.5 || b.y + b.height > vb.y + vb.height + 0.5) {
        out.push("CLIPPED " + name + " box " + [b.x, b.y, b.width, b.height].map(Math.round).join(","));
      }
      boxes.push({name: name, b: b});
    });
    for (var a = 0; a < boxes.length; a++) for (var c = a + 1; c < boxes.length; c++) {
      var p = boxes[a].b, q = boxes[c].b;
      if (p.x + 0.5 < q.x + q.width && q.x + 0.5 < p.x + p.width && p.y + 0.5 < q.y + q.height && q.y + 0.5 < p.y + p.height) {
        out.push("OVERLAP " + boxes[a].name + " and " + boxes[c].name);
      }
    }
  });
  if (document.documentElement.scrollWidth > window.innerWidth) {
    out.push("WIDE page is " + document.documentElement.scrollWidth + "px in a " + window.innerWidth + "px window");
  }
  document.getElementById("probe").textContent = "probe-done\n" + out.join("\n");
})();
</script>`

// TestReportLabelsFitInChromium lays reports out in a headless browser
// and fails on any label a reader would see cut off or drawn over another:
// long step names (one legend entry each), hours-long runs, huge counts
// and latencies, and a pipeline's stages and output.
func TestReportLabelsFitInChromium(t *testing.T) {
	long := sampleJob(7300, "GET /api/v1/accounts/{account_id}/orders?page=1", "POST /api/v1/session (login with the form's CSRF token)",
		"a", "b", "c", "d", "e", "f", "g", "h", "step with a rather long name 9", "step 10")
	wf := &long.Workflows[0]
	for i := range wf.Series {
		wf.Series[i].Completed = 12_345_678 + int64(i)
		wf.Series[i].P99Ms = 123_456.7
	}
	pipe := Workflow{Name: "count-signs", Type: "rainstorm", Status: "COMPLETED", Completed: 1_011_660,
		Stages: []Stage{{Name: "source", Tasks: 1, Records: 1_011_660, RecordsOut: 1_011_660},
			{Name: "filter-punched-telespar-with-a-long-name", Tasks: 3, Records: 1_011_660, RecordsOut: 30_123, Bad: 2}},
		Output: &Output{Header: []string{"key", "value"}, Total: 3, Complete: true,
			Rows: [][]string{{"Streetname that goes on and on and on, Champaign, Illinois, United States of America", "12"}, {"b", "7"}, {"c", "1"}}}}
	long.Workflows = append(long.Workflows, pipe)
	for name, j := range map[string]*Job{"long": long, "sample": sampleJob(95, "<script>", "get /cart")} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			page := filepath.Join(dir, "report.html")
			var buf bytes.Buffer
			if err := Render(&buf, j); err != nil {
				t.Fatal(err)
			}
			doc := strings.Replace(buf.String(), "</body>", layoutProbe+"</body>", 1)
			if err := os.WriteFile(page, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			dom := string(chromium(t, dir, page, "--dump-dom"))
			m := regexp.MustCompile(`(?s)<pre id="probe">probe-done\n(.*?)</pre>`).FindStringSubmatch(dom)
			if m == nil {
				t.Fatalf("the layout probe did not run; DOM:\n%.2000s", dom)
			}
			if problems := strings.TrimSpace(m[1]); problems != "" {
				t.Errorf("layout problems:\n%s", problems)
			}
		})
	}
}
