package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// root is the repository's root, two directories up from this package.
const root = "../.."

// maxREADMELines is the front door's budget: what the library is, the flow,
// the invariants, the tested wiring, the transports, the test command and
// links. Everything else lives beside the code it describes.
const maxREADMELines = 200

func TestREADMEIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	lines := strings.Count(string(b), "\n")
	if !strings.HasSuffix(string(b), "\n") {
		lines++
	}
	require.LessOrEqual(t, lines, maxREADMELines,
		"README.md has %d lines; move the detail to the package that owns it (doc.go, its README.md) and link it", lines)
	for _, section := range []string{"## The flow", "## Invariants", "<!-- wiring:begin -->", "## Choosing a transport", "bash internal/testenv/test.sh"} {
		require.Contains(t, string(b), section, "the front door names what the library is and how to try it")
	}
}

// markdownFiles lists every markdown file of the repository, outside
// dot-directories and testdata.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

var (
	// linkRE finds inline links and images: [text](target) and ![alt](target).
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// fenceRE finds fenced code blocks, whose text is not markdown.
	fenceRE = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```")
	// codeRE finds code spans.
	codeRE = regexp.MustCompile("`[^`\n]+`")
)

// prose is a markdown file's text without its code blocks and code spans.
func prose(s string) string {
	s = fenceRE.ReplaceAllString(s, "")
	return codeRE.ReplaceAllString(s, "``")
}

// anchors returns the fragment ids GitHub gives a markdown file's headings.
func anchors(s string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fenceRE.ReplaceAllString(s, ""), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// TestMarkdownLinksOpen checks every relative link of every markdown file:
// its file exists in the repository, and a fragment names a heading of the
// markdown file it points to.
func TestMarkdownLinksOpen(t *testing.T) {
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range linkRE.FindAllStringSubmatch(prose(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				rel, err := filepath.Rel(root, dest)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %q leaves the repository", file, target)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no such file in the repository", file, target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			db, err := os.ReadFile(dest)
			require.NoError(t, err)
			if !anchors(string(db))[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", file, target, dest, frag)
			}
		}
	}
}

// TestMarkdownCitesOnlyWhatOpens forbids references a reader cannot follow:
// issue numbers of a tracker that is not published with the code, passes
// known by a design document's numbers, and "the article".
func TestMarkdownCitesOnlyWhatOpens(t *testing.T) {
	bad := regexp.MustCompile(`(?i)\bissues? \d+|(?:^|[\s(])#\d+\b|\bthe article\b|\bscans? #`)
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		// Code blocks count (a diagram is read too); code spans and link
		// targets do not (an error message quoted, a heading's fragment).
		text := linkRE.ReplaceAllString(codeRE.ReplaceAllString(string(b), "``"), "]()")
		for i, line := range strings.Split(text, "\n") {
			if m := bad.FindString(line); m != "" {
				t.Errorf("%s:%d: %q cites what a reader cannot open; name it by what it is", file, i+1, strings.TrimSpace(m))
			}
		}
	}
}

// TestREADMETransportCallsAreCompiled keeps the calls the README quotes
// when it tells how each transport's wiring differs identical to code of
// this repository (the packages' example_test.go files), so a renamed
// constructor fails here rather than in a reader's build.
func TestREADMETransportCallsAreCompiled(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "## Choosing a transport")
	require.True(t, ok, "README.md has no section \"Choosing a transport\"")
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var code strings.Builder
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			code.Write(src)
		}
		return nil
	})
	require.NoError(t, err)
	calls := 0
	for _, span := range codeRE.FindAllString(section, -1) {
		span = strings.Trim(span, "`")
		if !strings.Contains(span, "(") {
			continue // a name, not a call
		}
		calls++
		if !strings.Contains(code.String(), span) {
			t.Errorf("README.md quotes %q, which no .go file of the repository contains: copy it from the compiled example", span)
		}
	}
	require.NotZero(t, calls, "the transport section shows how the wiring differs")
}

// TestNoMergeConflictMarkers fails on a file committed in the middle of a
// merge: a conflict's markers in a README are text, not an error, so
// nothing else would notice them.
func TestNoMergeConflictMarkers(t *testing.T) {
	marker := regexp.MustCompile(`(?m)^(<<<<<<< |>>>>>>> |=======$)`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".sql", ".json", ".mod":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := marker.FindIndex(b); loc != nil {
			t.Errorf("%s:%d: a merge conflict's marker", path, 1+strings.Count(string(b[:loc[0]]), "\n"))
		}
		return nil
	})
	require.NoError(t, err)
}
