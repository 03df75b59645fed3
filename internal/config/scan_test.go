package config_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rmago/rmago/internal/config"
)

// repoRoot is the module's root directory (where go.mod is).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// scanned says whether a file is code or documentation the scan reads:
// Go, shell, C, make and YAML files, scripts with a #! line, Markdown.
func scanned(path string, head []byte) bool {
	switch filepath.Ext(path) {
	case ".go", ".sh", ".c", ".h", ".py", ".mk", ".yml", ".yaml", ".md":
		return true
	case "":
		return filepath.Base(path) == "Makefile" || bytes.HasPrefix(head, []byte("#!"))
	}
	return false
}

var envName = regexp.MustCompile(`RMAGO_[A-Z0-9_]*[A-Z0-9](_\*)?`)

// TestConfigTableCoversSources: every RMAGO_ name in the sources (code,
// comments, scripts, docs) is a row of config.Vars, hence of
// docs/config.md. A new variable fails here until it is documented.
func TestConfigTableCoversSources(t *testing.T) {
	root := repoRoot(t)
	seen := map[string]string{} // name -> first file
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" || d.Name() == "bin" || d.Name() == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !scanned(path, data[:min(len(data), 2)]) || bytes.IndexByte(data, 0) >= 0 {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, m := range envName.FindAll(data, -1) {
			if _, ok := seen[string(m)]; !ok {
				seen[string(m)] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 || len(seen) < 10 {
		t.Fatalf("scanned %d files, found %d names: the walk missed the sources", files, len(seen))
	}
	var missing []string
	for name, file := range seen {
		if _, ok := config.Lookup(name); !ok {
			missing = append(missing, name+" (in "+file+")")
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("RMAGO_ variables not in config.Vars nor docs/config.md:\n\t%s", strings.Join(missing, "\n\t"))
	}
	// And no row documents a variable nothing uses.
	for _, v := range config.Vars {
		used := false
		for name := range seen {
			if l, ok := config.Lookup(name); ok && l.Name == v.Name {
				used = true
			}
		}
		if !used {
			t.Errorf("config.Vars documents %s, which no source mentions", v.Name)
		}
	}
}

// TestConfigDocTable: docs/config.md holds config.Markdown() verbatim.
func TestConfigDocTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	if table := config.Markdown(); !strings.Contains(string(doc), table) {
		t.Errorf("docs/config.md does not hold the table of config.Vars; it should read:\n%s", table)
	}
}
