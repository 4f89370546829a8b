package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/testenv"
)

// Every module of the build and tests has a licence compatible with
// Apache-2.0, and no source file of the repository is under the GPL
// family. go test -v prints the table.
func TestLicences(t *testing.T) {
	goTool := testenv.NeedTool(t, "go")
	root, err := repoRoot(goTool)
	require.NoError(t, err)
	mls, problems, err := check(goTool, root)
	require.NoError(t, err)
	t.Logf("the modules of hdet's build and tests:\n%s", table(mls))
	for _, p := range problems {
		t.Error(p)
	}
	assert.True(t, slices.ContainsFunc(mls, func(m moduleLicence) bool { return m.Main }), "hdet itself is listed")
}

// fixtures returns testdata/licences.txt's excerpts by the identifiers
// expected of them.
func fixtures(t *testing.T) [][2]string {
	b, err := os.ReadFile("testdata/licences.txt")
	require.NoError(t, err)
	var f [][2]string
	for _, part := range strings.Split(string(b), "\n== ")[1:] {
		want, text, _ := strings.Cut(part, "\n")
		f = append(f, [2]string{want, text})
	}
	require.Len(t, f, 18)
	return f
}

func TestClassify(t *testing.T) {
	for _, f := range fixtures(t) {
		want := strings.Fields(f[0])
		if f[0] == "none" {
			want = nil
		}
		if strings.HasPrefix(f[0], "FTL ") {
			want = []string{f[0]}
		}
		assert.ElementsMatch(t, want, classify(f[1]), "%q", f[1])
	}
}

// licenceOf's verdicts on modules made of fixtures.
func TestLicenceOf(t *testing.T) {
	text := map[string]string{}
	for _, f := range fixtures(t) {
		text[f[0]] = f[1]
	}
	for _, c := range []struct {
		files   map[string]string
		main    bool
		problem string
	}{
		{map[string]string{"LICENSE": text["MPL-2.0"]}, false, ""},
		{map[string]string{"COPYING": text["GPL"]}, false, "under GPL, not compatible with Apache-2.0"},
		{map[string]string{"LICENSE.md": text["Apache-2.0 MIT"], "LICENCE-LGPL.txt": text["LGPL"]}, false, "under LGPL, not compatible"},
		{map[string]string{"README": text["GPL"]}, false, "no LICENSE, LICENCE or COPYING file"},
		{map[string]string{"LICENSE": text["none"]}, false, "licence not recognised in LICENSE"},
		{map[string]string{"LICENSE": text["BSD-3-Clause"]}, true, "hdet's own LICENSE must be Apache-2.0"},
		{map[string]string{"LICENSE": text["Apache-2.0"], "NOTICE": text["GPL"]}, true, ""},
	} {
		dir := t.TempDir()
		for name, s := range c.files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644))
		}
		got := licenceOf(module{Path: "example.com/m", Dir: dir, Main: c.main}).Problem
		if c.problem == "" {
			assert.Empty(t, got, "%v", c.files)
		} else {
			assert.Contains(t, got, c.problem, "%v", c.files)
		}
	}
}

// scanSources finds GPL-family notices in .go, .c, .h and .py files only,
// outside dot directories, and not in look-alikes (msgPlan, MIT's SPDX).
func TestScanSources(t *testing.T) {
	text := map[string]string{}
	for _, f := range fixtures(t) {
		text[f[0]] = f[1]
	}
	root := t.TempDir()
	// The literals are split so that this file declares no licence.
	for name, s := range map[string]string{
		"a/gpl.go":     "package a\n\n// " + strings.ReplaceAll(text["GPL"], "\n", "\n// "),
		"b/lgpl.c":     "// SPDX-License-" + "Identifier: " + strings.ToUpper("lgpl") + "-2.1\nint x;\n",
		"b/x.h":        "/* This file is licensed under " + "the AGPL. */\n",
		"c/fine.py":    "# SPDX-License-Identifier: MIT\nmsgPlan = 'GPL-compatible'\n",
		"c/notes.txt":  text["GPL"],
		".hidden/h.go": "// " + text["GPL"],
		"data/d.go":    "// " + text["GPL"],
	} {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	found, err := scanSources(root)
	require.NoError(t, err)
	require.Len(t, found, 3, "%q", found)
	assert.True(t, strings.HasPrefix(found[0], "a/gpl.go:4: "), found[0])
	assert.True(t, strings.HasPrefix(found[1], "b/lgpl.c:1: "), found[1])
	assert.True(t, strings.HasPrefix(found[2], "b/x.h:1: "), found[2])
}
