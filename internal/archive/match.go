package archive

import (
	"path"
	"strings"
)

// Match reports whether name, a slash-separated path under the working
// directory, matches glob (checked by field.Glob): each part of the glob
// matches one part of the name as path.Match does, and a part "**" matches
// any number of parts, none included. So "*.png" matches "plot.png" but not
// "out/plot.png", which "**/*.png" and "out/*" match; "results/**" matches
// everything under results.
func Match(glob, name string) bool {
	g, n := strings.Split(glob, "/"), strings.Split(name, "/")
	// ok[j]: g[i:] matches n[j:], computed from the last part of the glob
	// back: time and memory bounded by len(g)*len(n), however many "**".
	ok := make([]bool, len(n)+1)
	ok[len(n)] = true
	for i := len(g) - 1; i >= 0; i-- {
		next := ok
		ok = make([]bool, len(n)+1)
		for j := len(n); j >= 0; j-- {
			if g[i] == "**" {
				ok[j] = next[j] || (j < len(n) && ok[j+1])
				continue
			}
			if j < len(n) {
				m, _ := path.Match(g[i], n[j])
				ok[j] = m && next[j+1]
			}
		}
	}
	return ok[0]
}

// MatchAny reports whether name matches one of globs.
func MatchAny(globs []string, name string) bool {
	for _, g := range globs {
		if Match(g, name) {
			return true
		}
	}
	return false
}
