package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Source is what an image records of the tree it is built from.
type Source struct {
	// Revision is the commit at HEAD, with "-dirty" when the working tree
	// differs from it (a change, or a file git does not ignore).
	Revision string
	// Created is SOURCE_DATE_EPOCH when set, else the commit's time: the
	// same tree gives the same images, whenever it is built.
	Created time.Time
	// Version is the tag at HEAD on a clean tree, or empty.
	Version string
}

// GitSource describes the git working tree at dir.
func GitSource(ctx context.Context, dir string) (Source, error) {
	var s Source
	head, err := git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return Source{}, err
	}
	status, err := git(ctx, dir, "status", "--porcelain")
	if err != nil {
		return Source{}, err
	}
	s.Revision = head
	if status != "" {
		s.Revision += "-dirty"
	} else if tag, err := git(ctx, dir, "describe", "--tags", "--exact-match", "HEAD"); err == nil {
		s.Version = tag
	}
	if epoch, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok {
		s.Created, err = parseEpoch(epoch)
		if err != nil {
			return Source{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
		}
		return s, nil
	}
	ct, err := git(ctx, dir, "log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return Source{}, err
	}
	if s.Created, err = parseEpoch(ct); err != nil {
		return Source{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	return s, nil
}

// parseEpoch parses seconds since the Unix epoch.
func parseEpoch(s string) (time.Time, error) {
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("want whole seconds since 1970-01-01 UTC, such as 1700000000")
	}
	return time.Unix(sec, 0).UTC(), nil
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
