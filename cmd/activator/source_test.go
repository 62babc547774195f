package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/pkg/service"
)

// TestLoadServices: a services file's keys are parsed once, on loading;
// a bad file is refused with a message naming what is wrong.
func TestLoadServices(t *testing.T) {
	load := func(content string) ([]activator.Service, error) {
		path := filepath.Join(t.TempDir(), "services.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return loadServices(path)
	}
	got, err := load(`{"services":[{"key":"shop/web","hosts":["web.example.com"],"containerConcurrency":2,
		"pods":[{"name":"web-a","addr":"10.0.0.1:8012"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []activator.Service{{
		Key: service.Key{Namespace: "shop", Name: "web"}, Hosts: []string{"web.example.com"}, ContainerConcurrency: 2,
		Pods: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	for _, tc := range []struct{ content, want string }{
		{`{"services":[{"key":"Shop/Web"}]}`, `service 0: service key "Shop/Web"`},
		{`{"services":[{"key":"shop/web"},{"key":"shop/web"}]}`, `service "shop/web" listed twice`},
		{`{"services":[{"key":"shop/web","containerConcurrency":-1}]}`, `containerConcurrency -1: must be ≥ 0`},
		{`{"services":[{"key":"shop/web","pods":[{"name":"a"}]}]}`, `pod 0: name and addr`},
		{`{"services":[{"key":"shop/web","concurrency":1}]}`, `unknown field`},
	} {
		if _, err := load(tc.content); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.content, err, tc.want)
		}
	}
}
