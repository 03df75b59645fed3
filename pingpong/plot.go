package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// plotOpts are the plot subcommand's flags.
type plotOpts struct {
	out      string
	bench    string
	syncMode string
	x        string // bytes or ranks
	size     int    // -x ranks: the message size in bytes
	stat     string // mean or median
	title    string
	cols     int
	width    float64 // cm per panel
	height   float64
}

func runPlot(args []string) error {
	var o plotOpts
	fs := newFlagSet("plot", "pingpong plot -o out.svg [-bench B,...] [-sync S,...] [-x bytes|ranks] [-size BYTES] a.json [b.json ...]")
	fs.StringVar(&o.out, "o", "pingpong.svg", "output `file` (.svg or .png); the other format is written beside it")
	fs.StringVar(&o.bench, "bench", "", "only these benchmarks (comma-separated), default all")
	fs.StringVar(&o.syncMode, "sync", "", "only these synchronization modes (comma-separated), default all")
	fs.StringVar(&o.x, "x", "bytes", "x axis: bytes (message size, log) or ranks (job size, at -size)")
	fs.IntVar(&o.size, "size", 8, "with -x ranks: the message size in bytes")
	fs.StringVar(&o.stat, "stat", "mean", "the value plotted: mean or median")
	fs.StringVar(&o.title, "title", "", "title prefix of every panel")
	fs.IntVar(&o.cols, "cols", 2, "panels per row")
	fs.Float64Var(&o.width, "width", 14, "panel width in cm")
	fs.Float64Var(&o.height, "height", 10, "panel height in cm")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("plot: name one or more JSON files")
	}
	if o.x != "bytes" && o.x != "ranks" {
		return usagef("-x %q: want bytes or ranks", o.x)
	}
	if o.stat != "mean" && o.stat != "median" {
		return usagef("-stat %q: want mean or median", o.stat)
	}
	var reps []*Report
	for _, path := range fs.Args() {
		r, err := readJSON(path)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	panels := o.panels(reps)
	if len(panels) == 0 {
		return fmt.Errorf("plot: no results match")
	}
	idx, names := styles(reps, panels)
	svgPath, pngPath := outPaths(o.out)
	if err := o.save(panels, idx, names, svgPath, true); err != nil {
		return err
	}
	if err := o.save(panels, idx, names, pngPath, false); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s (%d panels)\n", svgPath, pngPath, len(panels))
	return nil
}

// outPaths is the SVG and PNG file names for -o.
func outPaths(out string) (string, string) {
	base := strings.TrimSuffix(strings.TrimSuffix(out, filepath.Ext(out)), ".")
	return base + ".svg", base + ".png"
}

// panel is one chart: one benchmark and mode, a line per system.
type panel struct {
	key    string
	title  string
	metric string
	lines  []*series
}

type series struct {
	system string
	xy     plotter.XYs
}

// panels groups the results: a panel per (bench, sync, ranks) with -x
// bytes, per (bench, sync, bytes) with -x ranks; a line per system.
func (o *plotOpts) panels(reps []*Report) []*panel {
	keep := func(list, v string) bool {
		return list == "" || slices.Contains(strings.Split(list, ","), v)
	}
	byKey := map[string]*panel{}
	var order []string
	for _, rep := range reps {
		for _, r := range rep.Results {
			if !keep(o.bench, r.Bench) || !keep(o.syncMode, r.Sync) {
				continue
			}
			var key, title string
			var x float64
			if o.x == "bytes" {
				key = fmt.Sprintf("%s/%s/%s/%d", r.Bench, r.Sync, r.Window, r.Ranks)
				title = fmt.Sprintf("%s %s, %d ranks", r.Bench, r.Sync, r.Ranks)
				x = float64(r.Bytes)
			} else {
				if r.Bytes != o.size {
					continue
				}
				key = fmt.Sprintf("%s/%s/%s/%d", r.Bench, r.Sync, r.Window, r.Bytes)
				title = fmt.Sprintf("%s %s, %d bytes", r.Bench, r.Sync, r.Bytes)
				x = float64(r.Ranks)
			}
			if o.title != "" {
				title = o.title + ": " + title
			}
			p := byKey[key]
			if p == nil {
				p = &panel{key: key, title: title, metric: r.Metric}
				byKey[key] = p
				order = append(order, key)
			}
			y := r.Mean
			if o.stat == "median" {
				y = r.Median
			}
			if y <= 0 || math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			var s *series
			for _, l := range p.lines {
				if l.system == rep.Meta.System {
					s = l
				}
			}
			if s == nil {
				s = &series{system: rep.Meta.System}
				p.lines = append(p.lines, s)
			}
			s.xy = append(s.xy, plotter.XY{X: x, Y: y})
		}
	}
	var out []*panel
	for _, k := range order {
		p := byKey[k]
		for _, s := range p.lines {
			slices.SortFunc(s.xy, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		}
		out = append(out, p)
	}
	return out
}

// chart draws one panel, each system's line in its own style (the same in
// every panel). The panel has no legend of its own: save draws one for all
// panels above them, where it covers no data.
func (o *plotOpts) chart(p *panel, styles map[string]int) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.title
	pl.Y.Scale = plot.LogScale{}
	pl.Y.Tick.Marker = decadeTicks{}
	switch p.metric {
	case MetricRTT:
		pl.Y.Label.Text = "round-trip time (µs)"
	case MetricBW:
		pl.Y.Label.Text = "bandwidth (MB/s)"
	default:
		pl.Y.Label.Text = "latency (µs)"
	}
	if o.x == "bytes" {
		pl.X.Label.Text = "message size (bytes)"
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = byteTicks{}
	} else {
		pl.X.Label.Text = "ranks"
		pl.X.Tick.Marker = intTicks{}
		pl.X.Padding = vg.Millimeter * 4
	}
	pl.Add(plotter.NewGrid())
	for _, s := range p.lines {
		if len(s.xy) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return nil, err
		}
		line.LineStyle, points.GlyphStyle = style(styles[s.system])
		pl.Add(line, points)
	}
	return pl, nil
}

// style is the line and marker of the i-th system.
func style(i int) (draw.LineStyle, draw.GlyphStyle) {
	c := plotutil.Color(i)
	return draw.LineStyle{Color: c, Width: vg.Points(1.2), Dashes: plotutil.Dashes(i)},
		draw.GlyphStyle{Color: c, Radius: vg.Points(3), Shape: plotutil.Shape(i)}
}

// styles gives every system of the files its style by the order of the
// files on the command line, whether or not it has a line in a panel: the
// same files in the same order give every system the same colour and
// marker in every panel and every plot. It also returns the systems that
// have a line in some panel, in that order: the legend's entries.
func styles(reps []*Report, panels []*panel) (map[string]int, []string) {
	idx := map[string]int{}
	var order []string
	for _, r := range reps {
		if _, ok := idx[r.Meta.System]; !ok {
			idx[r.Meta.System] = len(order)
			order = append(order, r.Meta.System)
		}
	}
	var shown []string
	for _, name := range order {
		for _, p := range panels {
			if slices.ContainsFunc(p.lines, func(s *series) bool { return s.system == name && len(s.xy) > 0 }) {
				shown = append(shown, name)
				break
			}
		}
	}
	return idx, shown
}

// Legend layout: entries of legendCell width side by side, in rows of
// legendRow height, above the panels.
const (
	legendCell = 7 * vg.Centimeter
	legendRow  = 7 * vg.Millimeter
)

// legendHeight is the height of the legend of n systems across width w.
func legendHeight(n int, w vg.Length) vg.Length {
	perRow := max(1, int(w/legendCell))
	rows := (n + perRow - 1) / perRow
	return vg.Length(rows)*legendRow + 3*vg.Millimeter
}

// drawLegend draws one entry per system, side by side in rows, across the
// top of c, each in its style idx[name].
func drawLegend(c draw.Canvas, names []string, idx map[string]int) {
	w := c.Max.X - c.Min.X
	perRow := max(1, int(w/legendCell))
	for i, name := range names {
		row, col := i/perRow, i%perRow
		x := c.Min.X + 3*vg.Millimeter + vg.Length(col)*legendCell
		top := c.Max.Y - 2*vg.Millimeter - vg.Length(row)*legendRow
		cell := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x, Y: top - legendRow},
			Max: vg.Point{X: x + legendCell, Y: top},
		}}
		ls, gs := style(idx[name])
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		l.Add(name, &plotter.Line{LineStyle: ls}, &plotter.Scatter{GlyphStyle: gs})
		l.Draw(cell)
	}
}

// save draws every panel into one SVG or PNG file, in a grid under one
// legend of the systems names (styled by idx).
func (o *plotOpts) save(panels []*panel, idx map[string]int, names []string, path string, svg bool) error {
	cols := max(1, min(o.cols, len(panels)))
	rows := (len(panels) + cols - 1) / cols
	w := vg.Length(o.width*float64(cols)) * vg.Centimeter
	lh := legendHeight(len(names), w)
	h := vg.Length(o.height*float64(rows))*vg.Centimeter + lh
	var canvas vg.CanvasSizer
	var writer io.WriterTo
	if svg {
		c := vgsvg.New(w, h)
		canvas, writer = c, c
	} else {
		c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
		canvas, writer = c, vgimg.PngCanvas{Canvas: c}
	}
	dc := draw.New(canvas)
	drawLegend(draw.Crop(dc, 0, 0, h-lh, 0), names, idx)
	dc = draw.Crop(dc, 0, 0, 0, -lh)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	for i, p := range panels {
		pl, err := o.chart(p, idx)
		if err != nil {
			return err
		}
		pl.Draw(tiles.At(dc, i%cols, i/cols))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := writer.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// decadeTicks marks a log axis at 1, 2 and 5 times powers of ten (only at
// powers of ten across more than three decades), with unlabeled minor
// ticks between.
type decadeTicks struct{}

// Ticks implements plot.Ticker.
func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi/lo < 10 {
		// Less than a decade: plain evenly spaced values read better.
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	var ts []plot.Tick
	wide := hi/lo > 1000
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1.0; m <= 9; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (!wide && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// byteTicks marks a log axis of sizes in bytes at powers of two, labeled
// every third one (1, 8, 64, 512, 4K, ...).
type byteTicks struct{}

// Ticks implements plot.Ticker.
func (byteTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log2(lo)); math.Exp2(e) <= hi; e++ {
		v := math.Exp2(e)
		if v < lo {
			continue
		}
		t := plot.Tick{Value: v}
		if int(e)%3 == 0 {
			t.Label = sizeLabel(int64(v))
		}
		ts = append(ts, t)
	}
	return ts
}

// sizeLabel writes a byte count as 512, 4K, 16M.
func sizeLabel(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return strconv.FormatInt(b>>30, 10) + "G"
	case b >= 1<<20 && b%(1<<20) == 0:
		return strconv.FormatInt(b>>20, 10) + "M"
	case b >= 1<<10 && b%(1<<10) == 0:
		return strconv.FormatInt(b>>10, 10) + "K"
	}
	return strconv.FormatInt(b, 10)
}

// intTicks marks every whole number of a short linear axis (ranks).
type intTicks struct{}

// Ticks implements plot.Ticker.
func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi-lo > 32 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	var ts []plot.Tick
	for v := math.Ceil(lo); v <= hi; v++ {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.Itoa(int(v))})
	}
	return ts
}
