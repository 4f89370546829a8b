package plugins

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDirPrecedence(t *testing.T) {
	t.Setenv(EnvPluginDir, "/from/env")
	d, err := Dir("/from/flag")
	require.NoError(t, err)
	assert.Equal(t, "/from/flag", d)
	d, err = Dir("")
	require.NoError(t, err)
	assert.Equal(t, "/from/env", d)

	t.Setenv(EnvPluginDir, "")
	d, err = Dir("")
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(filepath.Dir(exe), "plugins"), d)
}

func writeFile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), mode))
}

func TestFindAndResolve(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "hdet-explorer-lr"), 0o755)
	writeFile(t, filepath.Join(dir, "hdet-explorer-dropout"), 0o755)
	writeFile(t, filepath.Join(dir, "hdet-explorer-notexec"), 0o644)
	writeFile(t, filepath.Join(dir, "other-tool"), 0o755)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "hdet-explorer-dir"), 0o755))

	found, err := Find(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "hdet-explorer-dropout"), filepath.Join(dir, "hdet-explorer-lr")}, found)
	assert.Equal(t, "lr", Name(found[1]))

	for _, ref := range []string{"lr", "hdet-explorer-lr", filepath.Join(dir, "hdet-explorer-lr")} {
		p, err := Resolve(dir, ref)
		require.NoError(t, err, ref)
		assert.Equal(t, filepath.Join(dir, "hdet-explorer-lr"), p)
	}
	for _, ref := range []string{"notexec", "dir", "missing", filepath.Join(dir, "other")} {
		_, err := Resolve(dir, ref)
		assert.ErrorIs(t, err, ErrNotExecutable, ref)
		assert.True(t, IsConfigError(err))
	}

	_, err = Find(filepath.Join(dir, "nope"))
	assert.Error(t, err)
}

func TestChecksums(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("abc"), 0o644))
	sum, err := FileSHA256(path)
	require.NoError(t, err)
	assert.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", sum)

	for _, ok := range []string{sum, "sha256:" + sum, strings.ToUpper(sum)} {
		_, err := parseChecksum(ok)
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"abc", sum[:62], sum + "00", "zz" + sum[2:]} {
		_, err := parseChecksum(bad)
		assert.ErrorIs(t, err, ErrBadChecksum, bad)
	}
}
