// Command licences lists every module that hdet's build and tests use,
// with its licence, and exits 1 when one is not compatible with Apache-2.0
// (the GPL family, SSPL, or a licence it does not recognise) or when a
// .go, .c, .h or .py file of this repository says it is under the GPL
// family. Run it from the repository: go run ./internal/tools/licences.
// Its test makes the same check under go test.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	root, err := repoRoot("go")
	if err != nil {
		fmt.Fprintf(os.Stderr, "licences: %v\n", err)
		os.Exit(2)
	}
	mls, problems, err := check("go", root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "licences: %v\n", err)
		os.Exit(2)
	}
	fmt.Print(table(mls))
	for _, p := range problems {
		fmt.Fprintf(os.Stderr, "licences: %s\n", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot(goTool string) (string, error) {
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not in a Go module (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}
