package main

import (
	"bufio"
	"io"
	"regexp"
)

// eventCounts are the scaling events `swell local` logged.
type eventCounts struct {
	scales   int // every "scale a→b"
	fromZero int // "scale 0→n"
	toZero   int // "scale n→0"
	crashes  int // "replica x crashed"
}

// Lines of `swell local`'s output, as docs/local.md shows them:
// "12:36:25.683 hello: scale 0→1 (poke)", "... hello: replica hello-1
// crashed; restarting it with backoff". Replicas' own lines start with
// "name | " and never match.
var (
	scaleLine = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} [a-z0-9-]+: scale (\d+)→(\d+) `)
	crashLine = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} [a-z0-9-]+: replica [a-z0-9-]+ crashed`)
)

// countEvents reads `swell local`'s output.
func countEvents(r io.Reader) (eventCounts, error) {
	var c eventCounts
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := scaleLine.FindStringSubmatch(line); m != nil {
			c.scales++
			if m[1] == "0" {
				c.fromZero++
			}
			if m[2] == "0" {
				c.toZero++
			}
			continue
		}
		if crashLine.MatchString(line) {
			c.crashes++
		}
	}
	return c, sc.Err()
}
