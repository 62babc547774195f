package replica

import "time"

// Restart delays: a crashed process waits backoffBase before its first
// restart, twice as long before each next one up to backoffMax, and is back
// at backoffBase once it has stayed up for backoffReset.
const (
	backoffBase  = 100 * time.Millisecond
	backoffMax   = 10 * time.Second
	backoffReset = 10 * time.Second
)

// backoff is the restart delay of one process. The zero value is ready.
type backoff struct{ next time.Duration }

// delay returns how long to wait before restarting a process that exited
// after running for uptime.
func (b *backoff) delay(uptime time.Duration) time.Duration {
	if b.next == 0 || uptime >= backoffReset {
		b.next = backoffBase
	}
	d := b.next
	b.next = min(2*d, backoffMax)
	return d
}
