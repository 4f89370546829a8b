package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/testenv"
)

// probeScript is injected, at test time only, at the top of a copy of
// index.html: it records every error event (script errors and resources
// that fail to load) and, once the page has loaded, writes into the title
// how many images there are, which did not decode, and how many errors
// fired. --dump-dom then prints the title.
const probeScript = `<script>
var probeErrors = 0;
window.addEventListener('error', function () { probeErrors++; }, true);
window.addEventListener('load', function () {
  var bad = [];
  for (var i = 0; i < document.images.length; i++) {
    var img = document.images[i];
    if (!img.complete || img.naturalWidth === 0) bad.push(img.getAttribute('src'));
  }
  document.title = 'PROBE images=' + document.images.length + ' bad=[' + bad.join(',') + '] errors=' + probeErrors;
});
</script>`

var probeTitle = regexp.MustCompile(`<title>PROBE images=(\d+) bad=\[([^\]]*)\] errors=(\d+)</title>`)

// chromiumCheck opens index.html (through a probed copy next to it) from
// file:// in headless Chromium and returns the image count, the images that
// did not load, the error count and the page's console messages.
func chromiumCheck(t *testing.T, index string) (images string, bad string, errs string, console []string) {
	t.Helper()
	bin := testenv.NeedTool(t, "chromium") // Debian package chromium
	html, err := os.ReadFile(index)
	require.NoError(t, err)
	probed := filepath.Join(filepath.Dir(index), "probe.html")
	require.NoError(t, os.WriteFile(probed, bytes.Replace(html, []byte("<head>"), []byte("<head>\n"+probeScript), 1), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--user-data-dir="+t.TempDir(),
		"--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
		"--dump-dom", "file://"+probed)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium: %s", stderr.String())

	m := probeTitle.FindStringSubmatch(stdout.String())
	require.NotNil(t, m, "the probe did not run; page as dumped:\n%s", stdout.String())
	for _, line := range strings.Split(stderr.String(), "\n") {
		// Chromium logs each console message of the page as INFO:CONSOLE.
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	return m[1], m[2], m[3], console
}

func TestIndexHTMLInChromium(t *testing.T) {
	t.Parallel()
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	out := t.TempDir()
	index, err := Write(run, out, Options{CSV: true})
	require.NoError(t, err)

	images, bad, errs, console := chromiumCheck(t, index)
	assert.Equal(t, "7", images)
	assert.Empty(t, bad, "images that did not load")
	assert.Equal(t, "0", errs)
	assert.Empty(t, console)
}

func TestTwoPassIndexHTMLInChromium(t *testing.T) {
	t.Parallel()
	run := t.TempDir()
	writeTwoPassRun(t, run)
	index, err := Write(run, t.TempDir(), Options{CSV: true})
	require.NoError(t, err)

	images, bad, errs, console := chromiumCheck(t, index)
	assert.Equal(t, "9", images, "hparam, offset and effective peak of both hyperparameters, loss, accuracy, timing; no weights")
	assert.Empty(t, bad)
	assert.Equal(t, "0", errs)
	assert.Empty(t, console)
}

func TestCompareHTMLInChromium(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	writeRun(t, a, defaultFixture())
	fx := defaultFixture()
	fx.lrScale = 0.5
	writeRun(t, b, fx)
	index, err := Compare([]string{a, b}, t.TempDir())
	require.NoError(t, err)

	images, bad, errs, console := chromiumCheck(t, index)
	assert.Equal(t, "1", images)
	assert.Empty(t, bad)
	assert.Equal(t, "0", errs)
	assert.Empty(t, console)
}

// TestChromiumCheckCatchesBrokenPage keeps the probe honest: a missing image
// and a script error must be seen.
func TestChromiumCheckCatchesBrokenPage(t *testing.T) {
	t.Parallel()
	run := t.TempDir()
	writeRun(t, run, defaultFixture())
	out := t.TempDir()
	index, err := Write(run, out, Options{})
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(out, "loss.png")))
	html, err := os.ReadFile(index)
	require.NoError(t, err)
	html = bytes.Replace(html, []byte("</body>"), []byte(`<script>console.error("boom"); notDefined();</script></body>`), 1)
	require.NoError(t, os.WriteFile(index, html, 0o644))

	_, bad, errs, console := chromiumCheck(t, index)
	assert.Equal(t, "loss.png", bad)
	assert.Equal(t, "2", errs, "the missing image and the ReferenceError")
	assert.Len(t, console, 2, "console.error and the uncaught error")
}
