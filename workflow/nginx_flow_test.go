package workflow

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
)

// nginxBinary finds nginx (Debian's nginx-light), which lives in /usr/sbin,
// not always on a test's PATH. Without it the test skips, except under CI,
// where .ci/run installs it and a missing nginx must fail the run rather
// than quietly drop the only test against a server no one here wrote.
func nginxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("nginx is not installed (Debian: apt-get install nginx-light), and CI is set")
	}
	t.Skip("nginx is not installed (Debian: apt-get install nginx-light)")
	return ""
}

// nginxFlowConf is a login flow in nginx alone: POST /login answers 302 to
// /home with a session cookie; /home answers 200 only with that cookie;
// /token answers a JSON token unique per request; /api answers 200 only to
// a bearer token of that shape. /miss has no token, /loop redirects to
// itself, and /tenth/N says "bad" when N ends in 9. The access log has one
// line per request: method, URI, status.
const nginxFlowConf = `
daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
    log_format flow '$request_method $uri $status';
    access_log %[1]s/access.log flow;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    absolute_redirect off;
    map $http_authorization $bearer_ok {
        default 0;
        "~^Bearer t-[0-9a-f]{32}$" 1;
    }
    server {
        listen 127.0.0.1:%[2]d;
        location = /login {
            if ($request_method != POST) { return 405; }
            add_header Set-Cookie "session=s3cret; Path=/; HttpOnly";
            return 302 /home;
        }
        location = /home {
            if ($cookie_session != "s3cret") { return 401; }
            default_type text/html;
            return 200 "<p>Welcome back</p>";
        }
        location = /token {
            default_type application/json;
            return 200 '{"data": {"token": "t-$request_id"}}';
        }
        location = /api {
            if ($bearer_ok = 0) { return 403; }
            default_type application/json;
            return 200 '{"ok": true}';
        }
        location = /miss {
            default_type application/json;
            return 200 '{}';
        }
        location = /loop { return 302 /loop; }
        location ~ "^/tenth/[0-9]*9$" { return 200 "bad"; }
        location /tenth/ { return 200 "good"; }
    }
}
`

// startNginx runs nginx in the foreground with its own prefix directory on
// a loopback port, until the test ends, and returns its base URL and its
// access log's path.
func startNginx(t *testing.T) (string, string) {
	t.Helper()
	bin := nginxBinary(t)
	dir := t.TempDir()
	port := testutil.FreeTCPPort(t)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxFlowConf, dir, port), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitNginx(t, bin, dir, conf, addr)
	return "http://" + addr, filepath.Join(dir, "access.log")
}

// waitNginx starts nginx with conf and prefix dir, stopped when the test
// ends, and waits until it accepts connections on addr.
func waitNginx(t *testing.T, bin, dir, conf, addr string) {
	t.Helper()
	// -e: the error log before the config is read (nginx ≥ 1.19.5), so
	// nothing is written outside dir.
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-exited:
			exited <- err
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s\n%s", err, out.String(), errLog)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// accessLog counts nginx's access-log lines by "METHOD URI STATUS", with
// every /tenth/N counted as /tenth.
func accessLog(t *testing.T, path string) (map[string]int64, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts, total := map[string]int64{}, int64(0)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("access log line %q", sc.Text())
		}
		if strings.HasPrefix(fields[1], "/tenth/") {
			fields[1] = "/tenth"
		}
		counts[strings.Join(fields, " ")]++
		total++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return counts, total
}

// A login flow against nginx: the POST's 302 sets a cookie the redirected
// GET must carry, a JSON token is captured and sent as a bearer header that
// nginx checks; every request is counted exactly against nginx's access
// log, and so is every check. A capture that misses, the step that needed
// it, a redirect loop past the limit and a check failing one time in ten
// are each counted under their class.
func TestNginxLoginFlow(t *testing.T) {
	base, logPath := startNginx(t)
	const vus, iters = 2, 100 // 50 iterations per VU: 0..49, five ending in 9 each
	p := HTTPParams{VUs: vus, Iterations: iters, Steps: []HTTPStep{
		{Name: "login", Method: "POST", URL: base + "/login", Body: "user=alice",
			Checks: []HTTPCheck{{Name: "home", Kind: CheckStatus, Statuses: []int{200}},
				{Name: "welcome", Kind: CheckBodyContains, Value: "Welcome"}}},
		{Name: "token", URL: base + "/token",
			Captures: []HTTPCapture{{Name: "token", Source: CaptureJSON, Expr: "data.token"}},
			Checks:   []HTTPCheck{{Name: "has-token", Kind: CheckJSON, Path: "data.token", Op: OpMatches, Value: "^t-[0-9a-f]{32}$"}}},
		{Name: "api", URL: base + "/api", Headers: map[string]string{"Authorization": "Bearer {{token}}"},
			Checks: []HTTPCheck{{Name: "authorized", Kind: CheckStatus, Statuses: []int{200}},
				{Name: "json", Kind: CheckHeader, Path: "Content-Type", Op: OpMatches, Value: "^application/json"}}},
		{Name: "miss", URL: base + "/miss", Captures: []HTTPCapture{{Name: "nothing", Source: CaptureJSON, Expr: "data.token"}}},
		{Name: "needs-miss", URL: base + "/api", Headers: map[string]string{"Authorization": "Bearer {{nothing}}"}},
		{Name: "loop", URL: base + "/loop"},
		{Name: "tenth", URL: base + "/tenth/{{iteration}}",
			Checks: []HTTPCheck{{Name: "good", Kind: CheckBodyContains, Value: "good"}}},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}

	// nginx writes a request's line unbuffered but after it answered, so
	// the last lines may land just after Run returned: wait for as many as
	// the engine sent, then compare.
	var skipped int64
	for _, st := range res.Steps {
		skipped += st.Errors[ErrorSkipped]
	}
	waitAccessLog(t, logPath, int(res.Completed+res.Failed-skipped))
	seen, total := accessLog(t, logPath)
	wantSeen := map[string]int64{
		"POST /login 302": iters, "GET /home 200": iters, "GET /token 200": iters, "GET /api 200": iters,
		"GET /miss 200": iters, "GET /loop 302": iters * (DefaultRedirects + 1), "GET /tenth 200": iters,
	}
	if fmt.Sprint(seen) != fmt.Sprint(wantSeen) {
		t.Errorf("nginx saw %v\nwant %v", seen, wantSeen)
	}
	if sent := res.Completed + res.Failed - skipped; sent != total {
		t.Errorf("engine sent %d requests (%d completed + %d failed - %d skipped), nginx logged %d",
			sent, res.Completed, res.Failed, skipped, total)
	}

	type counts struct {
		completed, failed int64
		errors            string
	}
	wantSteps := map[string]counts{
		"login":      {2 * iters, 0, "map[]"},
		"token":      {iters, 0, "map[]"},
		"api":        {iters, 0, "map[]"},
		"miss":       {0, iters, fmt.Sprintf("map[capture:%d]", iters)},
		"needs-miss": {0, iters, fmt.Sprintf("map[skipped:%d]", iters)},
		"loop":       {iters * DefaultRedirects, iters, fmt.Sprintf("map[redirects:%d]", iters)},
		"tenth":      {iters, 0, "map[]"},
	}
	wantChecks := map[string]string{
		"login": fmt.Sprintf("map[home:[%d 0] welcome:[%d 0]]", iters, iters),
		"token": fmt.Sprintf("map[has-token:[%d 0]]", iters),
		"api":   fmt.Sprintf("map[authorized:[%d 0] json:[%d 0]]", iters, iters),
		"tenth": fmt.Sprintf("map[good:[%d %d]]", iters-iters/10, iters/10),
	}
	for _, st := range res.Steps {
		got := counts{st.Completed, st.Failed, fmt.Sprint(st.Errors)}
		if got.errors == "map[]" || st.Errors == nil {
			got.errors = "map[]"
		}
		if got != wantSteps[st.Name] {
			t.Errorf("step %s: %+v, want %+v", st.Name, got, wantSteps[st.Name])
		}
		if w, ok := wantChecks[st.Name]; ok && fmt.Sprint(checkCounts(st)) != w {
			t.Errorf("step %s checks %v, want %s", st.Name, checkCounts(st), w)
		}
	}
}
