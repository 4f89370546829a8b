// Command funclen lists the functions longer than a limit (default 80
// lines) in a tree's Go files, tests and generated code excepted, and exits
// 1 when there are any: `make lint` keeps every function on one screen.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	limit := flag.Int("max", 80, "longest allowed function, in lines")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	long, err := scan(root, *limit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "funclen: %v\n", err)
		os.Exit(2)
	}
	for _, l := range long {
		fmt.Println(l)
	}
	if len(long) > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d functions over %d lines\n", len(long), *limit)
		os.Exit(1)
	}
}

// scan returns "file:line name: N lines" for each function over limit.
func scan(root string, limit int) ([]string, error) {
	var long []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "data" || d.Name() == "runs") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > limit {
				long = append(long, fmt.Sprintf("%s:%d %s: %d lines", p, start.Line, fd.Name.Name, n))
			}
		}
		return nil
	})
	return long, err
}
