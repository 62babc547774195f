// Command hello is the small app that Swell's tests, benchmarks and demos run
// behind the data plane; package demo documents its
// knobs, paths and settings. `swell hello` runs the same app.
package main

import (
	"os"

	"github.com/swell-run/swell/demo"
)

func main() {
	os.Exit(demo.Main(os.Args[1:], os.Getenv, os.Stderr))
}
