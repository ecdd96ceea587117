// Command plot draws docs/performance.png with gonum.org/v1/plot from the sweep data file
// (docs/performance-data.tsv, written by bench/sweep.sh): requests per second
// and p99 latency against the number of client connections, one line per
// target. The picture depends on the data file only (no dates, no host
// names), so the same data gives the same PNG.
//
//	plot -data docs/performance-data.tsv -out docs/performance.png
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"log"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type point struct{ conns, rps, p99 float64 }

func main() {
	data := flag.String("data", "docs/performance-data.tsv", "sweep data (target, conns, rps, p99_ms columns)")
	out := flag.String("out", "docs/performance.png", "PNG to write")
	title := flag.String("title", "fenceproxy vs go-plain, closed loop (wrk), PUT with fencing token, Redis without persistence", "figure title")
	flag.Parse()
	series, order, err := read(*data)
	if err != nil {
		log.Fatal(err)
	}
	if len(order) == 0 {
		log.Fatalf("%s: no data rows", *data)
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	if err := render(f, series, order, *title); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "plot: wrote %s (%d series)\n", *out, len(order))
}

// Size of the PNG: 12 x 5 inches at 100 dots per inch.
const (
	width, height = 12 * vg.Inch, 5 * vg.Inch
	dpi           = 100
)

// render draws the two panels side by side under a title and writes them
// to w as a PNG.
func render(w io.Writer, series map[string][]point, order []string, title string) error {
	thr := newPanel("Throughput", "client connections", "requests/s (median of rounds)")
	lat := newPanel("p99 latency", "client connections", "p99 (ms, median of rounds)")
	for i, name := range order {
		pts := series[name]
		slices.SortFunc(pts, func(a, b point) int { return int(a.conns - b.conns) })
		rps := make(plotter.XYs, len(pts))
		p99 := make(plotter.XYs, len(pts))
		for j, p := range pts {
			rps[j] = plotter.XY{X: p.conns, Y: p.rps}
			p99[j] = plotter.XY{X: p.conns, Y: p.p99}
		}
		for _, pl := range []struct {
			p  *plot.Plot
			xy plotter.XYs
		}{{thr, rps}, {lat, p99}} {
			line, points, err := plotter.NewLinePoints(pl.xy)
			if err != nil {
				return err
			}
			c := palette[i%len(palette)]
			line.Color, line.Width = c, vg.Points(2)
			points.Color, points.Shape = c, shapes[i%len(shapes)]
			points.Radius = vg.Points(3.5)
			pl.p.Add(line, points)
			pl.p.Legend.Add(name, line, points)
		}
	}
	ticks := conTicks(series)
	for _, p := range []*plot.Plot{thr, lat} {
		p.X.Tick.Marker = ticks
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Min = 0
		p.Y.Max *= 1.18 // room for the legend above the highest point
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs = vg.Points(8)
	}

	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	head := plot.New() // used for its title only
	head.Title.Text = title
	head.Title.TextStyle.Font.Size = vg.Points(13)
	head.HideAxes()
	top := draw.Crop(dc, 0, 0, 0, -vg.Points(26))
	head.Draw(dc)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(18), PadY: vg.Points(8), PadTop: vg.Points(6), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(10)}
	cells := plot.Align([][]*plot.Plot{{thr, lat}}, tiles, top)
	thr.Draw(cells[0][0])
	lat.Draw(cells[0][1])
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
}

var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PlusGlyph{}}

func newPanel(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Scale = plot.LogScale{}
	p.Add(plotter.NewGrid())
	return p
}

// conTicks puts a labelled tick at every measured connection count (a log
// axis's default ticks are powers of ten, which would label only 1 and 100).
func conTicks(series map[string][]point) plot.ConstantTicks {
	var cs []float64
	for _, pts := range series {
		for _, p := range pts {
			if !slices.Contains(cs, p.conns) {
				cs = append(cs, p.conns)
			}
		}
	}
	slices.Sort(cs)
	t := make(plot.ConstantTicks, len(cs))
	for i, c := range cs {
		t[i] = plot.Tick{Value: c, Label: strconv.FormatFloat(c, 'f', -1, 64)}
	}
	return t
}

// plainTicks are gonum's default ticks labelled without needless decimals
// ("7500", not "7500.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// read parses the data file (encoding/csv with tabs): '#' comment lines, a
// header naming the columns, then one row per target and connection count.
// Targets keep file order.
func read(path string) (map[string][]point, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comma, r.Comment, r.FieldsPerRecord = '\t', '#', -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, need := range []string{"target", "conns", "rps", "p99_ms"} {
		if _, ok := col[need]; !ok {
			return nil, nil, fmt.Errorf("%s: header lacks %q", path, need)
		}
	}
	series := map[string][]point{}
	var order []string
	for n, fields := range rows[1:] {
		num := func(name string) (float64, error) {
			i := col[name]
			if i >= len(fields) {
				return 0, fmt.Errorf("%s: row %d: missing %s", path, n+1, name)
			}
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("%s: row %d: %s: %q is not a number", path, n+1, name, fields[i])
			}
			return v, nil
		}
		var p point
		if p.conns, err = num("conns"); err != nil {
			return nil, nil, err
		}
		if p.rps, err = num("rps"); err != nil {
			return nil, nil, err
		}
		if p.p99, err = num("p99_ms"); err != nil {
			return nil, nil, err
		}
		if p.conns <= 0 {
			return nil, nil, fmt.Errorf("%s: row %d: conns must be positive for a log axis", path, n+1)
		}
		name := fields[col["target"]]
		if _, ok := series[name]; !ok {
			order = append(order, name)
		}
		series[name] = append(series[name], p)
	}
	return series, order, nil
}
