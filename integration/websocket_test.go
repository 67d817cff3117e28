package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"tempest/wire"
)

// A websocket job against an echo server built on coder/websocket: every
// message sent is echoed and counted once on both sides, each exchange a
// sample of its step, and its reply checked.
func TestWebSocketJobAgainstEcho(t *testing.T) {
	var conns, msgs atomic.Int64
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		conns.Add(1)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			msgs.Add(1)
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(echo.Close)

	c := startCluster(t, 1, 1, 1)
	id := c.submit(fmt.Sprintf(`name: echo
timeout: 60s
workflows:
  - name: chat
    type: websocket
    cores: 1
    vus: 4
    iterations: 200
    steps:
      - name: say
        url: "ws%s/echo"
        send: 'hello {{vu}}'
        expect: {match: '^hello [0-9]+$', timeout: 5s}
        checks:
          - {name: echoed, body_contains: hello}
`, strings.TrimPrefix(echo.URL, "http")))
	st := c.waitStatus(id, 45*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	wf := st.Workflows[0]
	if got := msgs.Load(); got != 200 || wf.CompletedCount != 200 || wf.FailedCount != 0 {
		t.Fatalf("the server echoed %d messages; the job counted %d completed, %d failed; want 200 each", got, wf.CompletedCount, wf.FailedCount)
	}
	if got := conns.Load(); got != 4 {
		t.Fatalf("%d connections, want one per VU", got)
	}
	step := wf.Steps[0]
	if step.Statuses["101"] != 200 || len(step.Checks) != 1 || step.Checks[0].Passed != 200 {
		t.Fatalf("step %s: statuses %v, checks %+v", step.Name, step.Statuses, step.Checks)
	}
}
