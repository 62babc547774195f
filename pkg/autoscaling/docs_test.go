package autoscaling

import (
	"os"
	"strings"
	"testing"
)

// TestDocsListEveryKey keeps docs/configuration.md in step with the keys:
// each has a table row showing its type and built-in default.
func TestDocsListEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			// A key's row starts with the key alone in its cell.
			if name, _, ok := strings.Cut(rest, "` |"); ok && !strings.Contains(name, "`") {
				rows[name] = line
			}
		}
	}
	for _, e := range table {
		row, ok := rows[e.Name]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s", e.Name)
			continue
		}
		if !strings.Contains(row, "| "+strings.ReplaceAll(e.Type, "|", `\|`)+" |") {
			t.Errorf("%s: row does not give type %q: %s", e.Name, e.Type, row)
		}
		if !strings.Contains(row, "| `"+e.Default+"` |") {
			t.Errorf("%s: row does not give default %q: %s", e.Name, e.Default, row)
		}
		if e.Scope != ScopeCluster && !strings.Contains(row, "| "+e.Policies+" |") {
			t.Errorf("%s: row does not give policy %q: %s", e.Name, e.Policies, row)
		}
	}
}
