package nodeagent

import "time"

// The kubelet waits 10s before the first restart of a crashed container and
// doubles up to 5m. The harness uses 1s doubling to 30s: end-to-end tests must
// observe restarts within seconds, and nothing here needs protecting from a
// crash loop the way a shared node does.
const (
	backoffInitial = time.Second
	backoffMax     = 30 * time.Second
	// backoffReset is how long a container must run before its next crash
	// starts the backoff over, as the kubelet does (it uses twice the maximum).
	backoffReset = 2 * backoffMax
)

// crashBackoff is the restart delay of one container. It is pure: the caller
// passes the times.
type crashBackoff struct {
	next time.Duration
}

// delay returns how long to wait before restarting a container that ran from
// started to exited, and advances the backoff.
func (b *crashBackoff) delay(started, exited time.Time) time.Duration {
	if b.next == 0 || exited.Sub(started) >= backoffReset {
		b.next = backoffInitial
	}
	d := b.next
	b.next = min(2*b.next, backoffMax)
	return d
}
