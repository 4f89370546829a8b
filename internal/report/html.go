package report

import (
	"fmt"
	"html/template"
	"io"
	"path/filepath"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// page is what index.html shows: tables, then figures, then links to the
// other files. It is self-contained: relative image paths, inline CSS, no
// scripts, so it opens from disk and from a copied directory.
type page struct {
	Title   string
	Lead    string
	Tables  []table
	Figures []Figure
	Files   []string
}

var pageTemplate = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
p.lead { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.none { color: #777; font-style: italic; border: none; padding-left: 0; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { color: #444; font-size: 0.95em; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="lead">{{.Lead}}</p>
{{range .Tables}}<h2>{{.Title}}</h2>
{{if .Rows}}<table>
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{else}}<table><tr><td class="none">None.</td></tr></table>
{{end}}{{end}}
{{if .Figures}}<h2>Figures</h2>
{{range .Figures}}<figure>
<img src="{{.Name}}.png" alt="{{.Caption}}" width="768" height="432">
<figcaption>{{.Caption}} (<a href="{{.Name}}.svg">SVG</a>)</figcaption>
</figure>
{{end}}{{end}}
{{if .Files}}<h2>Files</h2>
<ul>{{range .Files}}<li><a href="{{.}}">{{.}}</a></li>{{end}}</ul>
{{end}}
</body>
</html>
`))

// writePage writes dir/index.html and returns its path.
func writePage(dir string, pg page) (string, error) {
	path := filepath.Join(dir, "index.html")
	if err := atomicfile.WriteFunc(path, func(f io.Writer) error { return pageTemplate.Execute(f, pg) }); err != nil {
		return "", fmt.Errorf("report: index.html: %w", err)
	}
	return path, nil
}
