package harness

import (
	"regexp"
	"strings"
	"time"
)

// reLogLine matches one ofsdn-node log line in the text format (log/slog's TextHandler):
// its time, a WARN or ERROR level and its message.
var reLogLine = regexp.MustCompile(`^time=(\S+) level=(WARN|ERROR) msg="((?:[^"\\]|\\.)*)"`)

// rePodLine matches a line about one pod (a non-empty container_id): an ADD or DEL that
// failed is an event of its own, not a retry.
var rePodLine = regexp.MustCompile(`container_id=[^" ]`)

// RepeatedWarnings returns, by message, the warning and error lines of log (ofsdn-node's
// text log) stamped at or after since whose message occurs more than once, leaving out
// lines about one pod. An outage of OVS must be logged once, not per retry (issue 25):
// for a log covering one outage the result is empty.
func RepeatedWarnings(log string, since time.Time) map[string][]string {
	count := map[string][]string{}
	for _, l := range strings.Split(log, "\n") {
		m := reLogLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil || rePodLine.MatchString(l) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || at.Before(since) {
			continue
		}
		count[m[3]] = append(count[m[3]], l)
	}
	for msg, lines := range count {
		if len(lines) < 2 {
			delete(count, msg)
		}
	}
	return count
}
