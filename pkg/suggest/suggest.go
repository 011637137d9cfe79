// Package suggest finds what a mistyped name was meant to be: a setting's
// key in ferry.toml, a command on the command line.
package suggest

import "strings"

// Closest returns the word within MaxTypos edits of name (compared in
// lower case), the closest first and the earliest of equals, or "" if
// none is.
func Closest(name string, words []string) string {
	best, bestDist := "", -1
	for _, w := range words {
		if d := Distance(strings.ToLower(name), w); d <= MaxTypos(name) && (bestDist < 0 || d < bestDist) {
			best, bestDist = w, d
		}
	}
	return best
}

// MaxTypos is how many edits still count as a typo: one for names of up to
// four bytes, so that dir is not taken for url, two for longer ones.
func MaxTypos(name string) int {
	if len(name) <= 4 {
		return 1
	}
	return 2
}

// Distance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes each cost
// one, so "wram" is one edit from "warm".
func Distance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
