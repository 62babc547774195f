package loadgen

import (
	"fmt"
	"io"
	"time"
)

// progressLine describes a run so far in one line.
func progressLine(elapsed time.Duration, sent, done, failed, planned uint64) string {
	total := ""
	if planned > 0 {
		total = fmt.Sprintf("/%d", planned)
	}
	rate := 0.0
	if elapsed > 0 {
		rate = float64(sent) / elapsed.Seconds()
	}
	return fmt.Sprintf("%8s  sent %d%s  rate %s/s  in-flight %d  errors %d",
		elapsed.Round(100*time.Millisecond), sent, total, formatRate(rate), sent-done, failed)
}

// progress writes a progress line every interval until stop is closed, and
// a last one then.
func (g *generator) progress(began time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(g.opts.ProgressInterval)
	defer tick.Stop()
	write := func(last bool) {
		// done before sent: both only grow, so sent - done cannot wrap.
		done, failed := g.done.Load(), g.failed.Load()
		line := progressLine(time.Since(began), g.sent.Load(), done, failed, g.plan.planned)
		switch {
		case !g.opts.ProgressOverwrite:
			line += "\n"
		case last:
			// Erase the rest of the previous line, then leave this one.
			line = "\r" + line + "\x1b[K\n"
		default:
			line = "\r" + line + "\x1b[K"
		}
		// Progress is best effort: a closed stderr must not stop the run.
		_, _ = io.WriteString(g.opts.Progress, line)
	}
	for {
		select {
		case <-tick.C:
			write(false)
		case <-stop:
			write(true)
			return
		}
	}
}
