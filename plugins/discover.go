package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// BinaryPrefix starts the file name of every explorer binary.
const BinaryPrefix = "hdet-explorer-"

// EnvPluginDir names the plugin directory when --plugin-dir is not given.
const EnvPluginDir = "HDET_PLUGIN_DIR"

// Dir picks the plugin directory: flagDir when set, else $HDET_PLUGIN_DIR,
// else plugins/ next to the running executable (bin/plugins for bin/hdet).
func Dir(flagDir string) (string, error) {
	if flagDir != "" {
		return flagDir, nil
	}
	if d := os.Getenv(EnvPluginDir); d != "" {
		return d, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the plugin directory: %w", err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Join(filepath.Dir(exe), "plugins"), nil
}

// Find lists the explorer binaries (hdet-explorer-*, executable) in dir, sorted.
func Find(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read plugin directory: %w", err)
	}
	var found []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), BinaryPrefix) && checkExecutable(path) == nil {
			found = append(found, path)
		}
	}
	sort.Strings(found)
	return found, nil
}

// Resolve turns an explorer reference into a binary path: a reference with a
// slash is a path; otherwise "lr" or "hdet-explorer-lr" is looked up in dir.
func Resolve(dir, ref string) (string, error) {
	path := ref
	if !strings.ContainsRune(ref, filepath.Separator) {
		path = filepath.Join(dir, BinaryPrefix+strings.TrimPrefix(ref, BinaryPrefix))
	}
	if err := checkExecutable(path); err != nil {
		return "", err
	}
	return path, nil
}

// FileSHA256 is the hex SHA-256 of the file at path, the value a config pins.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Name is an explorer binary's name without its directory and prefix.
func Name(path string) string {
	return strings.TrimPrefix(filepath.Base(path), BinaryPrefix)
}
