// Command hello is the small app that Swell's tests, benchmarks and demos run
// behind the data plane; package app (examples/hello/app) documents its
// knobs, paths and settings. `swell hello` runs the same app.
package main

import (
	"os"

	"github.com/swell-run/swell/examples/hello/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], os.Getenv, os.Stderr))
}
