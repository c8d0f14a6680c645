package testsuite

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// An agent cut off from its server for 12 s fails a worker heartbeat
// every 1.5 s (its 1 s timeout, then interval/4), about 8 times: it logs
// one WARN when the failures start and one INFO line when a heartbeat is
// delivered again, naming how long and how many attempts, not a WARN per
// try.
func TestAgentCutOffLogsItsHeartbeatFailuresOnce(t *testing.T) {
	const id = "quietlogs-a"
	proxy := startTCPProxy(t, suite.srv.FrontendHostPort())
	agent := spawnAgentVia(t, id, proxy.Addr())
	waitWorkersActive(t, id)
	logPath := agent.Stdout.(*os.File).Name()

	proxy.Cut()
	time.Sleep(12 * time.Second)
	proxy.Heal()
	recovered := regexp.MustCompile(`msg="worker heartbeat delivered again after (\d+\.\d) s, (\d+) attempts"`)
	var log string
	waitFor(t, 20*time.Second, "the agent's recovery line", func() bool {
		b, _ := os.ReadFile(logPath)
		log = string(b)
		return recovered.MatchString(log)
	})
	starts := strings.Count(log, `msg="worker heartbeat" `)
	assert.Equal(t, 1, starts, "one WARN for the run of failures:\n%s", log)
	assert.NotContains(t, log, "still failing", "no 30 s repeat within 12 s")
	m := recovered.FindStringSubmatch(log)
	n, _ := strconv.Atoi(m[2])
	assert.GreaterOrEqual(t, n, 5, "the failed attempts counted: %s", m[0])
	t.Logf("%s", m[0])
}
