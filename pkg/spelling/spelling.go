// Package spelling finds what a user most likely meant to write: the "did
// you mean" of Swell's error messages about unknown keys, fields and
// values.
package spelling

// Distance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours each cost
// one, so "kap" is one edit from "kpa". It compares runes as they are; fold
// case first when case does not matter.
func Distance(a, b string) int {
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
