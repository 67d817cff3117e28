package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRenderInChromium draws the report in a headless browser, which
// catches SVG or HTML a browser refuses but string checks do not.
func TestRenderInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (command -v chromium): cannot render the report headless")
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	// The extra flags keep a sandboxed machine's browser from reaching for
	// the network (updates, sync, QUIC probes) while it renders a local file.
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1000,2000",
		"--screenshot="+png, "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
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
