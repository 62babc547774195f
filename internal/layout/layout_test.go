package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	Deps                               []string
}

// list returns every package of the module.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Deps", Module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

// rel returns a module path relative to the module root, and false for a
// path outside the module.
func rel(imp string) (string, bool) {
	r, ok := strings.CutPrefix(imp, Module+"/")
	return r, ok
}

// TestRooms checks every import of every package against its room's
// walls.
func TestRooms(t *testing.T) {
	for _, p := range list(t) {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		room, ok := RoomOf(from)
		if !ok {
			t.Errorf("%s is in no room: add its top-level directory to layout.Rooms", from)
			continue
		}
		check := func(imports []string, test bool) {
			for _, imp := range imports {
				to, ours := rel(imp)
				if !ours || to == from {
					continue
				}
				top, _, _ := strings.Cut(to, "/")
				allowed := top == room.Dir || slices.Contains(room.May, top) ||
					test && (top == "internal" || slices.Contains(TestOnly[from], to))
				if !allowed {
					kind := "imports"
					if test {
						kind = "imports in a test"
					}
					t.Errorf("%s %s %s: room %s/ may import only %v", from, kind, to, room.Dir, append([]string{room.Dir}, room.May...))
				}
			}
		}
		check(p.Imports, false)
		check(p.TestImports, true)
		check(p.XTestImports, true)
		for _, dep := range p.Deps {
			for _, never := range room.Never {
				if Matches(dep, never) {
					t.Errorf("%s depends on %s, which room %s/ must not", from, dep, room.Dir)
				}
			}
		}
	}
}

// TestCore checks that the decision core does no I/O of its own.
func TestCore(t *testing.T) {
	found := 0
	for _, p := range list(t) {
		from, _ := rel(p.ImportPath)
		if !slices.Contains(Core, from) {
			continue
		}
		found++
		for _, dep := range p.Deps {
			for _, never := range CoreNever {
				if Matches(dep, never) {
					t.Errorf("decision core %s depends on %s", from, dep)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no package of the decision core found")
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		imp, pattern string
		want         bool
	}{
		{"net/http", "net/http", true},
		{"net/http/httptest", "net/http", false},
		{"k8s.io/client-go/kubernetes", "k8s.io/client-go/", true},
		{"k8s.io/client-go", "k8s.io/client-go/", true},
		{"k8s.io/client-gofer", "k8s.io/client-go/", false},
	} {
		if got := Matches(tc.imp, tc.pattern); got != tc.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", tc.imp, tc.pattern, got, tc.want)
		}
	}
}
