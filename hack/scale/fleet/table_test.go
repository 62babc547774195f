//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two mappings of one file, as two processes of a fleet hold it, see each
// other's steps and scrapes; a service is stepped once, by whichever
// asked first.
func TestTableIsShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table")
	a, err := mapTable(path, 3, 15)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mapTable(path, 3, 15)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.step(2); ok {
		t.Fatal("a new table has a step")
	}
	if !a.setStep(2, Step{At: 7 * time.Second, Factor: 3}) {
		t.Fatal("the first step was refused")
	}
	if s, ok := b.step(2); !ok || s != (Step{At: 7 * time.Second, Factor: 3}) {
		t.Errorf("the other mapping reads %+v, %t", s, ok)
	}
	if b.setStep(2, Step{At: time.Second, Factor: 2}) {
		t.Error("a service was stepped twice")
	}
	// A step at the epoch itself is a step.
	if !b.setStep(0, Step{Factor: 2}) {
		t.Fatal("a step at 0 was refused")
	}
	if s, ok := a.step(0); !ok || s.At != 0 || s.Factor != 2 {
		t.Errorf("step at 0 reads %+v, %t", s, ok)
	}
	b.scraped[14].Store(42)
	if got := a.scraped[14].Load(); got != 42 {
		t.Errorf("the last pod's scrape reads %d through the other mapping", got)
	}
	if _, ok := a.step(1); ok {
		t.Error("a service not stepped has a step")
	}
}

func TestTableRefusesAnotherFleetsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table")
	if _, err := mapTable(path, 3, 15); err != nil {
		t.Fatal(err)
	}
	// Another size, and the same size for another shape.
	if _, err := mapTable(path, 4, 15); err == nil || !strings.Contains(err.Error(), "another fleet") {
		t.Errorf("another size: %v", err)
	}
	if _, err := mapTable(path, 2, 20); err == nil || !strings.Contains(err.Error(), "not a fleet table of 2 services and 20 pods") {
		t.Errorf("another shape of the same size: %v", err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, make([]byte, tableSize(3, 15)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mapTable(junk, 3, 15); err == nil {
		t.Error("a file of zeros was taken for a table")
	}
}
