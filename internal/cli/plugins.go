package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/hdet-dev/hdet/plugins"
)

// errPluginsFailed: some explorer did not pass; the details are already printed.
var errPluginsFailed = errors.New("explorer check failed")

func runPlugins(s Streams, args []string) error {
	if len(args) == 0 {
		return Usagef("plugins needs a subcommand: list [--plugin-dir DIR] | check [flags] BINARY")
	}
	switch args[0] {
	case "list":
		return runPluginsList(s, args[1:])
	case "check":
		return runPluginsCheck(s, args[1:])
	default:
		return Usagef("plugins: unknown subcommand %q; allowed: list, check", args[0])
	}
}

// pluginLog is where go-plugin and explorers log during list and check:
// warnings and errors only, so the command's own output stays readable.
func pluginLog(s Streams) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: s.Err, NoColor: true}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
}

func runPluginsList(s Streams, args []string) error {
	fs := newFlagSet(s, "plugins list")
	dirFlag := fs.String("plugin-dir", "", "directory of hdet-explorer-* binaries (default $"+plugins.EnvPluginDir+", then plugins/ next to hdet)")
	timeout := fs.Duration("timeout", plugins.DefaultTimeout, "deadline of each explorer call")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("plugins list takes no arguments, got %q", fs.Args())
	}
	dir, err := plugins.Dir(*dirFlag)
	if err != nil {
		return err
	}
	found, err := plugins.Find(dir)
	if err != nil {
		if *dirFlag != "" {
			return Usagef("--plugin-dir %s: %v", *dirFlag, err)
		}
		return err
	}
	if len(found) == 0 {
		fmt.Fprintf(s.Out, "no %s* binaries in %s\n", plugins.BinaryPrefix, dir)
		return nil
	}
	tw := tabwriter.NewWriter(s.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tHYPERPARAMETER\tSHA256\tPATH")
	var failed int
	for _, path := range found {
		sum, err := plugins.FileSHA256(path)
		if err != nil {
			return err
		}
		version, hp := "?", "?"
		d, err := plugins.Describe(context.Background(), plugins.Spec{Binary: path, Timeout: *timeout}, pluginLog(s))
		if err != nil {
			failed++
			fmt.Fprintf(s.Err, "%s: %v\n", path, err)
		} else {
			version, hp = d.Version, d.Hyperparameter
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", plugins.Name(path), version, hp, sum, path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d explorers did not describe themselves", errPluginsFailed, failed, len(found))
	}
	return nil
}

func runPluginsCheck(s Streams, args []string) error {
	fs := newFlagSet(s, "plugins check")
	dirFlag := fs.String("plugin-dir", "", "where to look up BINARY when it is a bare name such as lr")
	checksum := fs.String("sha256", "", "refuse the binary unless its SHA-256 is this (hex)")
	config := fs.String("config", "", "the explorer's config block, as JSON (default: the example the explorer describes, else {})")
	timeout := fs.Duration("timeout", plugins.DefaultTimeout, "deadline of each explorer call")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return Usagef("plugins check takes one BINARY (a path, or a name in the plugin directory), got %d arguments", fs.NArg())
	}
	var block []byte // nil: the explorer's example
	if *config != "" {
		block = []byte(*config)
	}
	if block != nil && !json.Valid(block) {
		return Usagef("--config must be JSON, got %q", *config)
	}
	if *timeout <= 0 {
		return Usagef("--timeout must be positive, got %s", *timeout)
	}
	dir, err := plugins.Dir(*dirFlag)
	if err != nil {
		return err
	}
	path, err := plugins.Resolve(dir, fs.Arg(0))
	if err != nil {
		return Usagef("%s: %v", fs.Arg(0), err)
	}
	spec := plugins.Spec{Binary: path, Checksum: *checksum, Timeout: *timeout}
	steps, err := plugins.Check(context.Background(), spec, block, pluginLog(s))
	for _, st := range steps {
		verdict := "ok"
		if st.Err != nil {
			verdict = "FAIL"
		}
		fmt.Fprintf(s.Out, "%-10s %-4s %8s  %s\n", st.Name, verdict, st.Took.Round(100*time.Microsecond), st.Detail)
		if st.Err != nil {
			fmt.Fprintf(s.Out, "           %v\n", st.Err)
		}
	}
	if err != nil {
		fmt.Fprintf(s.Out, "FAIL: %s is not a working explorer\n", path)
		if plugins.IsConfigError(err) {
			return &UsageError{Err: err}
		}
		return fmt.Errorf("%w: %w", errPluginsFailed, err)
	}
	fmt.Fprintf(s.Out, "PASS: %s is a working explorer\n", path)
	return nil
}
