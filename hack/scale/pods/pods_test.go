package pods

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := []Service{
		{Service: "scale/svc-00001", Kind: KindBusy, Pods: []string{"127.1.0.1:9090", "127.1.0.2:9090"}},
		{Service: "scale/svc-00002", Kind: KindZero, Pods: []string{"127.1.0.3:9090"}},
	}
	path := filepath.Join(t.TempDir(), "pods.jsonl")
	if err := WriteFile(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("read back %+v, want %+v", out, in)
	}
}

func TestReadReportsEveryLine(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"service":"scale/ok","kind":"busy","pods":[]}` + "\n")
	b.WriteString(`{"service":"Bad","kind":"busy"}` + "\n")
	b.WriteString("\n")
	b.WriteString(`{"service":"scale/x","kind":"sleepy"}` + "\n")
	b.WriteString(`not json` + "\n")
	_, err := Read(&b)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"line 2", `"Bad"`, "line 4", `"sleepy"`, "busy bursting idle zero", "line 5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
