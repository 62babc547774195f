// Package helm holds Helm, pinned as a Go tool (`go tool helm` here; the
// Makefile lints Swell's chart with it), and the chart's tests: that it
// renders deploy/'s objects, that its values do what they say, and that
// Helm pulls and renders it from a registry as `make push` packages and
// pushes it. It is a module of its own so that Helm's dependencies never
// choose the versions Swell's binaries link.
package helm
