package config

import (
	"os"
	"testing"
)

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(svc))
	f.Add([]byte(svc + "    annotations:\n      autoscaling.swell.run/min-scale: 5\n      autoscaling.swell.run/max-scale: 2\n"))
	f.Add([]byte("services:\n  - name: a\n    command: &c [x]\n  - name: b\n    command: *c\n    env: {A: 1}\n"))
	f.Add([]byte("defaults:\n  window: 10s\n" + svc + "    hosts: [a.localhost:80]\n    timeout: 1m\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("swell.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatalf("Parse returned a File with error %v", err)
			}
			return
		}
		if len(file.Services) == 0 {
			t.Fatal("Parse returned a File without services")
		}
		for _, s := range file.Services {
			if err := s.Spec.Validate(); err != nil {
				t.Fatalf("service %s: Spec.Validate: %v", s.Name, err)
			}
			if checkName(s.Name) != "" || len(s.Command) == 0 || s.Command[0] == "" {
				t.Fatalf("invalid service %+v", s)
			}
		}
	})
}
