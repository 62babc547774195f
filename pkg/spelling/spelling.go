// Package spelling finds what a user most likely meant to write: the "did
// you mean" of Swell's error messages about unknown keys, fields and
// values.
package spelling

import (
	"strings"
	"unicode"
)

// Suggest returns the candidate the user most likely meant by s, as the
// candidate is written, or "" when none is close enough. It tries, in
// order:
//
//  1. a candidate that is s written another way: in another letter case,
//     or with other separators or none ("minScale", "MIN_SCALE" and
//     "min.scale" for "min-scale", "containerconcurrency" for
//     "containerConcurrency");
//  2. the one candidate that starts with s, when s has at least four
//     letters ("target-util" for "target-utilization-percentage");
//  3. the candidate fewest edits away — an edit being one letter
//     inserted, deleted, changed, or swapped with its neighbour — when
//     that is at most one edit per four letters of s, and always at least
//     one and at most three ("kap" for "kpa", "min-scal" for "min-scale").
//
// Every step ignores case and separators ('-', '_', '.', ' '), and the
// first candidate wins a tie. The bound in step 3 grows with s so that a
// short word is not "corrected" into an unrelated one, while a long one
// may carry a typo or two.
func Suggest(s string, candidates []string) string {
	w := fold(s)
	if w == "" {
		return ""
	}
	folded := make([]string, len(candidates))
	for i, c := range candidates {
		folded[i] = fold(c)
		if folded[i] == w {
			return c
		}
	}
	n := len([]rune(w))
	if n >= 4 {
		found := -1
		for i, f := range folded {
			if strings.HasPrefix(f, w) {
				if found >= 0 {
					found = -1
					break
				}
				found = i
			}
		}
		if found >= 0 {
			return candidates[found]
		}
	}
	best, bestD := "", maxEdits(n)+1
	for i, f := range folded {
		if d := distance(w, f); d < bestD {
			best, bestD = candidates[i], d
		}
	}
	return best
}

// maxEdits is the most edits Suggest allows between a word of n letters
// (separators not counted) and what it suggests for it.
func maxEdits(n int) int {
	return max(1, min(3, n/4))
}

// fold lowercases s and drops its separators, so that the ways of writing
// one name compare equal.
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '-', '_', '.', ' ':
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// distance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours each cost
// one, so "kap" is one edit from "kpa". It compares runes as they are.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows suffice: the swap looks two rows back.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
