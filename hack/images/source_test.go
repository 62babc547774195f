package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commitTime is when the test repositories' commits are made.
var commitTime = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// gitRepo returns a repository with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "init", "-q")
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "-c", "user.name=Swell", "-c", "user.email=swell@example.com", "commit", "-q", "-m", "one")
	return dir
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE="+commitTime.Format(time.RFC3339))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestGitSource(t *testing.T) {
	dir := gitRepo(t)
	head := gitIn(t, dir, "rev-parse", "HEAD")

	s, err := GitSource(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Revision != head || !s.Created.Equal(commitTime) || s.Version != "" {
		t.Errorf("clean tree: %+v, want revision %s created %v and no version", s, head, commitTime)
	}

	gitIn(t, dir, "tag", "v1.2.3")
	if s, err := GitSource(t.Context(), dir); err != nil || s.Version != "v1.2.3" {
		t.Errorf("tagged tree: %+v (%v), want version v1.2.3", s, err)
	}

	// A file git does not ignore makes the tree differ from the commit.
	if err := os.WriteFile(filepath.Join(dir, "new.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := GitSource(t.Context(), dir); err != nil || s.Revision != head+"-dirty" || s.Version != "" {
		t.Errorf("dirty tree: %+v (%v), want revision %s-dirty and no version", s, err, head)
	}

	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if s, err := GitSource(t.Context(), dir); err != nil || !s.Created.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("SOURCE_DATE_EPOCH: %+v (%v), want created %v", s, err, time.Unix(1700000000, 0).UTC())
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := GitSource(t.Context(), dir); err == nil || !strings.Contains(err.Error(), `SOURCE_DATE_EPOCH "yesterday": want whole seconds`) {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}
