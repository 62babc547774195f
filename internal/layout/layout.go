// Package layout states the rooms of Swell's tree and what each may import;
// its test fails the build when an import crosses a wall
// (docs/architecture.md draws the same picture).
package layout

import "strings"

// Module is Swell's module path.
const Module = "github.com/swell-run/swell"

// A Room is a top-level part of the tree.
type Room struct {
	// Dir is the room's directory, relative to the module root.
	Dir string
	// May lists the rooms the room's packages may import, itself excluded
	// (a room may always import its own packages).
	May []string
	// Never lists packages the room must not depend on, even indirectly,
	// by import-path prefix (a trailing slash matches a tree).
	Never []string
}

// clientGo is the Kubernetes client; only the Kubernetes integration, the
// binaries that wire it and the test cluster use it.
const clientGo = "k8s.io/client-go/"

// Rooms are Swell's rooms, from the floor up.
var Rooms = []Room{
	// The floor: shared leaves.
	{Dir: "pkg", Never: []string{clientGo}},
	// The components. Each meets the others only through pkg/.
	{Dir: "queueproxy", May: []string{"pkg"}, Never: []string{clientGo}},
	{Dir: "activator", May: []string{"pkg"}, Never: []string{clientGo}},
	{Dir: "autoscaler", May: []string{"pkg"}, Never: []string{clientGo}},
	{Dir: "demo", May: []string{"pkg"}, Never: []string{clientGo}},
	// The compositions: they wire components for one purpose.
	{Dir: "kube", May: []string{"pkg", "queueproxy", "activator", "autoscaler"}},
	{Dir: "local", May: []string{"pkg", "queueproxy", "activator", "autoscaler", "demo"}, Never: []string{clientGo}},
	// Test support.
	{Dir: "internal", May: []string{"pkg"}},
	// The binaries, the harnesses and the manifests' tests: anything but
	// another binary.
	{Dir: "cmd", May: []string{"pkg", "queueproxy", "activator", "autoscaler", "demo", "kube", "local"}},
	{Dir: "hack", May: []string{"pkg", "queueproxy", "activator", "autoscaler", "demo", "kube", "local", "internal"}},
	{Dir: "deploy", May: []string{"pkg", "kube", "internal"}},
}

// TestOnly lists the imports a package's tests may make across a wall,
// each with why. Nothing else crosses.
var TestOnly = map[string][]string{
	// The activators' report protocol, its two ends run together: the
	// reporter against the autoscaler's real endpoint.
	"activator/reporter": {"autoscaler/collector"},
}

// Core lists the decision core: the packages `swell sim` and the tests
// drive on a virtual clock. They do no I/O of their own, so they depend on
// neither net/http nor the Kubernetes client.
var Core = []string{
	"autoscaler/decider",
	"autoscaler/window",
	"autoscaler/engine",
	"autoscaler/plan",
	"autoscaler/sim",
}

// CoreNever is what the decision core must not depend on, even
// indirectly.
var CoreNever = []string{"net/http", clientGo}

// RoomOf returns the room of a package path relative to the module root,
// and false for a path in no room.
func RoomOf(rel string) (Room, bool) {
	top, _, _ := strings.Cut(rel, "/")
	for _, r := range Rooms {
		if r.Dir == top {
			return r, true
		}
	}
	return Room{}, false
}

// Matches reports whether the import path imp is pattern: equal to it, or
// inside it when pattern ends in a slash.
func Matches(imp, pattern string) bool {
	if p, tree := strings.CutSuffix(pattern, "/"); tree {
		return imp == p || strings.HasPrefix(imp, pattern)
	}
	return imp == pattern
}
