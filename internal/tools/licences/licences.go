package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
)

// licence recognises a licence by phrases of its text, compared after
// normalize. The GNU licences' phrases are written with underscores, which
// normalize makes spaces, so that this file does not match gplDeclaration.
type licence struct {
	id   string
	ok   bool     // compatible with Apache-2.0
	all  []string // phrases that must all appear
	none []string // phrases that must not
	// exclusive: the text names other licences that it does not put the
	// code under, so nothing else is looked for in it.
	exclusive bool
}

var licences = []licence{
	// Freetype-Go lets the user choose the FreeType License (BSD-like, with
	// a credit in the documentation: see NOTICE) or the GPL.
	{id: "FTL (dual licence, FTL taken)", ok: true, exclusive: true,
		all: []string{"your choice of exactly one of", "freetype license", "gnu_general_public_license"}},
	// MPL-2.0 names the GPL family as its "Secondary Licenses".
	{id: "MPL-2.0", ok: true, exclusive: true, all: []string{"mozilla public license version 2 0"}},
	// The OFL's grant begins with the MIT licence's words.
	{id: "OFL-1.1", ok: true, exclusive: true, all: []string{"sil open font license", "version 1 1"}},
	{id: "Apache-2.0", ok: true, all: []string{"apache license", "version 2 0"}},
	{id: "MIT", ok: true, all: []string{"permission is hereby granted free of charge to any person obtaining a copy"}},
	{id: "BSD-3-Clause", ok: true, all: []string{"redistribution and use in source and binary forms", "neither the name"}},
	{id: "BSD-2-Clause", ok: true, all: []string{"redistribution and use in source and binary forms"}, none: []string{"neither the name"}},
	{id: "ISC", ok: true, all: []string{"permission to use copy modify and", "distribute this software for any purpose with or without fee is hereby granted"}},
	{id: "Unlicense", ok: true, all: []string{"this is free and unencumbered software released into the public domain"}},
	{id: "Zlib", ok: true, all: []string{"provided as is without any express or implied warranty", "permission is granted to anyone to use this software for any purpose"}},
	{id: "CC-BY-4.0", ok: true, all: []string{"creative commons attribution 4 0 international"}},
	{id: "AGPL", all: []string{"gnu_affero_general_public_license"}},
	{id: "LGPL", all: []string{"gnu_lesser_general_public_license"}},
	{id: "LGPL", all: []string{"gnu_library_general_public_license"}},
	{id: "GPL", all: []string{"gnu_general_public_license"}},
	{id: "SSPL", all: []string{"server side public license"}},
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// normalize lower-cases text and turns every run of other characters than
// letters and digits into one space.
func normalize(text string) string {
	return " " + nonWord.ReplaceAllString(strings.ToLower(text), " ") + " "
}

// classify returns the identifiers of the licences text contains.
func classify(text string) []string {
	t := normalize(text)
	has := func(p string) bool { return strings.Contains(t, normalize(p)) }
	var ids []string
	for _, l := range licences {
		if !slices.ContainsFunc(l.all, func(p string) bool { return !has(p) }) && !slices.ContainsFunc(l.none, has) {
			if l.exclusive {
				return []string{l.id}
			}
			if !slices.Contains(ids, l.id) {
				ids = append(ids, l.id)
			}
		}
	}
	return ids
}

func compatible(id string) bool {
	i := slices.IndexFunc(licences, func(l licence) bool { return l.id == id })
	return licences[i].ok
}

// module is a module of the build, as `go list -json` describes it.
type module struct {
	Path, Version, Dir string
	Main               bool
	Replace            *module
}

// moduleLicence is a module's licence: the licences its files contain,
// and what is wrong with them, if anything.
type moduleLicence struct {
	module
	IDs     []string
	Files   []string
	Problem string
}

// buildModules returns the modules that provide a package to this
// repository's build or tests: `go list -deps -test ./...` from root.
func buildModules(goTool, root string) ([]module, error) {
	cmd := exec.Command(goTool, "list", "-deps", "-test", "-json=Module", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.Bytes())
	}
	var mods []module
	seen := map[string]bool{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct{ Module *module }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list's output: %w", err)
		}
		m := p.Module
		if m == nil || seen[m.Path] { // nil: the standard library
			continue
		}
		seen[m.Path] = true
		if m.Replace != nil {
			m.Version, m.Dir = m.Replace.Version, m.Replace.Dir
		}
		mods = append(mods, *m)
	}
	slices.SortFunc(mods, func(a, b module) int { return strings.Compare(a.Path, b.Path) })
	return mods, nil
}

var licenceFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([-._].*)?$`)

// licenceOf reads the licence files at the root of m's directory.
func licenceOf(m module) moduleLicence {
	ml := moduleLicence{module: m}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		ml.Problem = fmt.Sprintf("cannot read its directory: %v", err)
		return ml
	}
	for _, e := range entries {
		if e.IsDir() || !licenceFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
		if err != nil {
			ml.Problem = err.Error()
			return ml
		}
		ml.Files = append(ml.Files, e.Name())
		for _, id := range classify(string(b)) {
			if !slices.Contains(ml.IDs, id) {
				ml.IDs = append(ml.IDs, id)
			}
		}
	}
	slices.Sort(ml.IDs)
	ml.Problem = verdict(ml)
	return ml
}

func verdict(ml moduleLicence) string {
	var bad []string
	for _, id := range ml.IDs {
		if !compatible(id) {
			bad = append(bad, id)
		}
	}
	switch {
	case len(ml.Files) == 0:
		return "no LICENSE, LICENCE or COPYING file"
	case len(ml.IDs) == 0:
		return fmt.Sprintf("licence not recognised in %s", strings.Join(ml.Files, ", "))
	case len(bad) > 0:
		return fmt.Sprintf("under %s, not compatible with Apache-2.0", strings.Join(bad, ", "))
	case ml.Main && !slices.Equal(ml.IDs, []string{"Apache-2.0"}):
		return "hdet's own LICENSE must be Apache-2.0"
	}
	return ""
}

// table formats the modules' licences, one line each.
func table(mls []moduleLicence) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MODULE\tVERSION\tLICENCE\tFILES")
	for _, ml := range mls {
		v := ml.Version
		if ml.Main {
			v = "(this repository)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", ml.Path, v, strings.Join(ml.IDs, " AND "), strings.Join(ml.Files, " "))
	}
	w.Flush()
	return b.String()
}

// gplDeclaration matches a source file's saying that it is under the
// GPL family: the licences' names (spaces or hyphens between the words,
// so that this file names no licence), an SPDX identifier, or "licensed
// under" an acronym.
var gplDeclaration = regexp.MustCompile(`(?i)GNU[\s-]+(Lesser[\s-]+|Library[\s-]+|Affero[\s-]+)?General[\s-]+Public[\s-]+License` +
	`|SPDX-License-Identifier:\s*\(?\s*(A|L)?GPL|\b(licensed|released|distributed)\s+under\s+(the\s+)?(terms\s+of\s+the\s+)?(A|L)?GPL\b`)

// scanSources returns "file:line: text" for each line of the repository's
// .go, .c, .h and .py files (outside dot directories, data, runs and bin)
// that gplDeclaration matches.
func scanSources(root string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || slices.Contains([]string{"data", "runs", "bin"}, d.Name())) {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains([]string{".go", ".c", ".h", ".py"}, filepath.Ext(p)) {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		s.Buffer(nil, 1<<20)
		for line := 1; s.Scan(); line++ {
			if gplDeclaration.Match(s.Bytes()) {
				rel, _ := filepath.Rel(root, p)
				found = append(found, fmt.Sprintf("%s:%d: %s", rel, line, strings.TrimSpace(s.Text())))
			}
		}
		return s.Err()
	})
	return found, err
}

// check returns the build's modules with their licences, and the problems:
// incompatible or unknown licences, and source files under the GPL family.
func check(goTool, root string) ([]moduleLicence, []string, error) {
	mods, err := buildModules(goTool, root)
	if err != nil {
		return nil, nil, err
	}
	var mls []moduleLicence
	var problems []string
	for _, m := range mods {
		ml := licenceOf(m)
		mls = append(mls, ml)
		if ml.Problem != "" {
			problems = append(problems, fmt.Sprintf("%s %s: %s", m.Path, m.Version, ml.Problem))
		}
	}
	gpl, err := scanSources(root)
	for _, s := range gpl {
		problems = append(problems, s+" (says it is under the GPL family)")
	}
	return mls, problems, err
}
