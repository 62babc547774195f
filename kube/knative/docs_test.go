package knative

import (
	"os"
	"strings"
	"testing"
)

const docsPath = "../../docs/knative.md"

// The markers around the table in docs/knative.md that TestDocsTable
// writes.
const (
	tableBegin = "<!-- The mapping table, written from kube/knative's rules by: go test ./kube/knative -run TestDocsTable -update -->\n"
	tableEnd   = "<!-- End of the mapping table. -->\n"
)

// markdownTable renders the rules as docs/knative.md shows them.
func markdownTable() string {
	var b strings.Builder
	b.WriteString("| Knative | Swell | how |\n| --- | --- | --- |\n")
	for _, r := range rules {
		name := "`" + r.Knative + "`"
		switch r.place {
		case onLabel:
			name = "label " + name
		case onAnnotation:
			if !strings.HasPrefix(r.Knative, knativeAutoscaling) {
				name = "annotation " + name
			}
		}
		for _, a := range r.Aliases {
			short := a
			if strings.HasPrefix(a, knativeAutoscaling) {
				short = strings.TrimPrefix(a, knativeAutoscaling)
			}
			name += " (or `" + short + "`)"
		}
		b.WriteString("| " + name + " | " + r.Swell + " | " + r.How + " |\n")
	}
	return b.String()
}

// TestDocsTable keeps docs/knative.md's mapping table the rules': the
// table between the markers is markdownTable's (go test -update rewrites
// it).
func TestDocsTable(t *testing.T) {
	raw, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no mapping table between the markers %q and %q", docsPath, tableBegin, tableEnd)
	}
	got := doc[i+len(tableBegin) : j]
	want := markdownTable()
	if got == want {
		return
	}
	if *update {
		doc = doc[:i+len(tableBegin)] + want + doc[j:]
		if err := os.WriteFile(docsPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's mapping table is not the rules' (go test ./kube/knative -run TestDocsTable -update rewrites it):\n%s\nwant:\n%s", docsPath, got, want)
}

// TestEveryRuleDocumented: every rule says what it becomes and how, for
// the table.
func TestEveryRuleDocumented(t *testing.T) {
	for _, r := range rules {
		if r.Swell == "" || r.How == "" || strings.Contains(r.How, "|") {
			t.Errorf("rule %s: Swell %q, How %q; want both, without a |", r.Knative, r.Swell, r.How)
		}
	}
}

// TestDocsExample: the example docs/knative.md shows is what the import
// writes for testdata/helloworld-go.yaml.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile("testdata/helloworld-go.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import([]Input{{Name: "helloworld-go.yaml", Data: in}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "becomes\n\n```yaml\n"+string(out)+"```\n") {
		t.Errorf("%s does not show what helloworld-go.yaml becomes:\n%s", docsPath, out)
	}
}
