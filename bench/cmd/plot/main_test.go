package main

import (
	"bytes"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRender draws the plot of a small sweep data file (a real run's) and
// checks that the PNG decodes, has the documented size, and shows each
// series in its colour.
func TestRender(t *testing.T) {
	series, order, err := read(filepath.Join("testdata", "performance-data.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "go-plain,fenceproxy" || len(series["fenceproxy"]) != 4 {
		t.Fatalf("read: order %v, fenceproxy %v", order, series["fenceproxy"])
	}
	var b bytes.Buffer
	if err := render(&b, series, order, "test"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got.X != 1200 || got.Y != 500 {
		t.Fatalf("PNG is %v, want 1200x500 (12 x 5 in at 100 dpi)", got)
	}
	for i := range order {
		want := color.RGBAModel.Convert(palette[i]).(color.RGBA)
		n := 0
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == want {
					n++
				}
			}
		}
		if n < 100 {
			t.Errorf("series %s: only %d pixels of its colour %v", order[i], n, want)
		}
	}
}

func TestReadRejects(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"no p99 column": "target\tconns\trps\nfenceproxy\t1\t100\n",
		"not a number":  "# comment\ntarget\tconns\trps\tp99_ms\nfenceproxy\t1\tmany\t2.0\n",
		"zero conns":    "target\tconns\trps\tp99_ms\nfenceproxy\t0\t100\t2.0\n",
		"short row":     "target\tconns\trps\tp99_ms\nfenceproxy\t1\t100\n",
	} {
		path := filepath.Join(dir, "data.tsv")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := read(path); err == nil {
			t.Errorf("%s: read accepted it", name)
		}
	}
}
