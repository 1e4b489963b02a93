// Package docscheck checks the repository's Markdown pages: every relative
// link (a file, a heading's #anchor, or both) leads somewhere. Its test
// runs the check over README.md, the other pages at the root and docs/,
// so a page moved or a heading renamed without its links fails the build.
// Another test keeps issue numbers out of the repository's text.
package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

var (
	// inlineLink is [text](target) or ![alt](target "title"); the text
	// may hold one level of brackets, as [`x[0]`](#x) does.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink is a reference definition: [label]: target
	refLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)`)
	// htmlLink is an HTML attribute that names a file: <img src="x">.
	htmlLink = regexp.MustCompile(`(?i)\b(?:src|href)="([^"]+)"`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// lineAnchor is GitHub's anchor of a line of a source file.
	lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)
)

// Link is one link of a page, with where it is.
type Link struct {
	File   string // the page, as given to Links
	Line   int
	Target string
}

func (l Link) String() string { return fmt.Sprintf("%s:%d: %s", l.File, l.Line, l.Target) }

// Links returns the links of the Markdown page file, outside code blocks
// and code spans.
func Links(file string) ([]Link, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var links []Link
	forEachLine(string(b), func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, re := range []*regexp.Regexp{inlineLink, refLink, htmlLink} {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				links = append(links, Link{file, n, m[1]})
			}
		}
	})
	return links, nil
}

// forEachLine calls f with each line of a Markdown text that is not in a
// fenced code block, numbered from 1.
func forEachLine(text string, f func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		f(i+1, line)
	}
}

// Anchors returns the anchors GitHub gives the headings of a Markdown
// text: the heading's text in lower case, without punctuation, spaces as
// hyphens; a second heading of the same text gets -1, a third -2.
func Anchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	forEachLine(text, func(_ int, line string) {
		if !strings.HasPrefix(line, "#") {
			return
		}
		title := strings.TrimLeft(line, "#")
		if len(line)-len(title) > 6 || (title != "" && title[0] != ' ' && title[0] != '\t') {
			return // not a heading: ####### or #tag
		}
		slug := Slug(title)
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	})
	return anchors
}

// Slug is GitHub's anchor of a heading's text.
func Slug(title string) string {
	title = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(title), "#"))
	// A link in a heading counts by its text.
	title = inlineLink.ReplaceAllStringFunc(title, func(m string) string {
		return m[strings.Index(m, "[")+1 : strings.LastIndex(m, "](")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Check returns an error for each relative link of the pages that leads
// nowhere: to no file or directory, or to a heading its page lacks.
// Links with a scheme (https:, mailto:) are not followed.
func Check(pages []string) []error {
	var errs []error
	anchors := map[string]map[string]bool{} // by page
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		b, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		anchors[page] = Anchors(string(b))
		return anchors[page], nil
	}
	for _, page := range pages {
		links, err := Links(page)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range links {
			if err := checkLink(l, anchorsOf); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", l, err))
			}
		}
	}
	return errs
}

func checkLink(l Link, anchorsOf func(string) (map[string]bool, error)) error {
	t := l.Target
	if i := strings.Index(t, ":"); i > 0 && !strings.ContainsAny(t[:i], "/#.") {
		return nil // https:, mailto:: not ours to check
	}
	if strings.HasPrefix(t, "/") {
		return fmt.Errorf("an absolute path, which leads nowhere outside this machine: make it relative")
	}
	path, anchor, _ := strings.Cut(t, "#")
	target := l.File
	if path != "" {
		target = filepath.Join(filepath.Dir(l.File), filepath.FromSlash(path))
		if _, err := os.Stat(target); err != nil {
			return fmt.Errorf("no such file %s", target)
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(target, ".md") {
		if lineAnchor.MatchString(anchor) {
			return nil
		}
		return fmt.Errorf("#%s in %s, which is not a Markdown page", anchor, target)
	}
	a, err := anchorsOf(target)
	if err != nil {
		return err
	}
	if !a[anchor] {
		return fmt.Errorf("%s has no heading #%s", target, anchor)
	}
	return nil
}
