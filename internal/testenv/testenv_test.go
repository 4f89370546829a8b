package testenv

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that records Need's verdict instead of acting
// on it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...) }
func (r *recorder) Skipf(f string, a ...any)  { r.skip = fmt.Sprintf(f, a...) }

func TestNeedSkipsOnADeveloperBoxAndFailsUnderCI(t *testing.T) {
	missing := errors.New("widget is not installed")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		Need(r, missing, GetTool)
		if ci == "" {
			want := "widget is not installed (`make test` installs it)"
			if r.fatal != "" || r.skip != want {
				t.Errorf("CI unset: skip %q, fatal %q; want the skip %q", r.skip, r.fatal, want)
			}
			continue
		}
		want := "widget is not installed (required under CI: `make test` installs it)"
		if r.skip != "" || r.fatal != want {
			t.Errorf("CI set: skip %q, fatal %q; want the failure %q", r.skip, r.fatal, want)
		}
	}
	r := &recorder{TB: t}
	Need(r, nil, GetTool)
	if r.skip != "" || r.fatal != "" {
		t.Errorf("nothing missing: skip %q, fatal %q", r.skip, r.fatal)
	}
}

func TestNeedHelpersSayWhatIsMissing(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	NeedTool(r, "hdet-no-such-tool")
	if want := `hdet-no-such-tool is not installed: exec: "hdet-no-such-tool": executable file not found in $PATH (` + GetTool + ")"; r.skip != want {
		t.Errorf("NeedTool: skip %q, want %q", r.skip, want)
	}
	dir := t.TempDir()
	r = &recorder{TB: t}
	if got := NeedData(r, "MNIST", dir, "t10k-labels-idx1-ubyte.gz"); got != dir {
		t.Errorf("NeedData returned %q, want %q", got, dir)
	}
	want := "MNIST is missing in " + dir + ": stat " + filepath.Join(dir, "t10k-labels-idx1-ubyte.gz") + ": no such file or directory (" + GetData + ")"
	if r.skip != want {
		t.Errorf("NeedData: skip %q, want %q", r.skip, want)
	}
	r = &recorder{TB: t}
	NeedData(r, "nothing", dir)
	if r.skip != "" {
		t.Errorf("NeedData without files: skip %q", r.skip)
	}
}

func TestRepoRootHoldsGoMod(t *testing.T) {
	r := &recorder{TB: t}
	NeedData(r, "go.mod", RepoRoot(), "go.mod")
	if r.skip != "" || r.fatal != "" {
		t.Errorf("RepoRoot %s: %s%s", RepoRoot(), r.skip, r.fatal)
	}
}

// Python is $HDET_PYTHON when set, else the venv at the repository root
// (found from the working directory, this package's folder).
func TestPythonIsTheVenvs(t *testing.T) {
	t.Setenv("HDET_PYTHON", "")
	if got, want := python(), filepath.Join(RepoRoot(), ".venv", "bin", "python"); got != want {
		t.Errorf("python() = %q, want %q", got, want)
	}
	t.Setenv("HDET_PYTHON", "/opt/py/bin/python")
	if got := python(); got != "/opt/py/bin/python" {
		t.Errorf("with HDET_PYTHON: python() = %q", got)
	}
}
