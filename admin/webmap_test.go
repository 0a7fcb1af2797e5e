package admin

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// svgDoc is the part of the map's SVG the tests read.
type svgDoc struct {
	XMLName    xml.Name `xml:"svg"`
	ViewBox    string   `xml:"viewBox,attr"`
	LabelledBy string   `xml:"aria-labelledby,attr"`
	Patterns   []struct {
		ID string `xml:"id,attr"`
	} `xml:"defs>pattern"`
	Links []struct {
		Href     string `xml:"href,attr"`
		TabIndex string `xml:"tabindex,attr"`
		Title    string `xml:"title"`
		Rect     struct {
			Class  string `xml:"class,attr"`
			X      int    `xml:"x,attr"`
			Y      int    `xml:"y,attr"`
			Width  int    `xml:"width,attr"`
			Height int    `xml:"height,attr"`
		} `xml:"rect"`
	} `xml:"a"`
}

func parseMap(t *testing.T, s string) svgDoc {
	t.Helper()
	var d svgDoc
	if err := xml.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("the map is not well-formed XML: %v", err)
	}
	return d
}

func TestNodeMapFullPool(t *testing.T) {
	const n = 4096
	cells := make([]mapCell, n)
	want := map[cellStatus]string{cellFree: "f", cellCooling: "c", cellLeased: "l", cellGrace: "g", cellQuarantined: "q"}
	for i := range cells {
		cells[i].Status = cellStatuses[i%len(cellStatuses)]
	}
	cells[7].Tip = `Node 7: leased by <host&"a"> pid 1`
	out := string(renderNodeMap(cells, 0, func(i int) string { return "?node=" + strconv.Itoa(i) }, "map-h"))
	d := parseMap(t, out)
	if d.ViewBox != "0 0 639 639" || d.LabelledBy != "map-h" {
		t.Errorf("viewBox %q labelledby %q", d.ViewBox, d.LabelledBy)
	}
	if len(d.Links) != n {
		t.Fatalf("%d links, want %d", len(d.Links), n)
	}
	for i, a := range d.Links {
		c := cells[i]
		if a.Href != "?node="+strconv.Itoa(i) {
			t.Fatalf("cell %d links to %q", i, a.Href)
		}
		if a.Rect.Class != want[c.Status] {
			t.Fatalf("cell %d (%s) has class %q, want %q", i, c.Status, a.Rect.Class, want[c.Status])
		}
		if a.Rect.X != i%64*10 || a.Rect.Y != i/64*10 || a.Rect.Width != 9 || a.Rect.Height != 9 {
			t.Fatalf("cell %d at %d,%d size %dx%d", i, a.Rect.X, a.Rect.Y, a.Rect.Width, a.Rect.Height)
		}
		// Free cells are no tab stops (the list and the node form reach them);
		// every other cell is one.
		if free := c.Status == cellFree; free != (a.TabIndex == "-1") {
			t.Fatalf("cell %d (%s) tabindex %q", i, c.Status, a.TabIndex)
		}
		wantTitle := fmt.Sprintf("Node %d: %s", i, c.Status.Label())
		if c.Tip != "" {
			wantTitle = c.Tip
		}
		if a.Title != wantTitle {
			t.Fatalf("cell %d title %q, want %q", i, a.Title, wantTitle)
		}
	}
	if strings.Contains(out, "<host") {
		t.Error("a tooltip was not escaped")
	}
	ids := map[string]bool{}
	for _, p := range d.Patterns {
		ids[p.ID] = true
	}
	for _, id := range []string{"nm-g", "nm-q", "nm-c"} {
		if !ids[id] {
			t.Errorf("pattern %s missing; have %v", id, ids)
		}
	}
	if len(out) > 500_000 {
		t.Errorf("the map of 4096 cells takes %d bytes", len(out))
	}
}

func TestNodeMapShapes(t *testing.T) {
	// A partial last row, and an empty pool.
	d := parseMap(t, string(renderNodeMap(make([]mapCell, 70), 0, func(i int) string { return "#" }, "")))
	if d.ViewBox != "0 0 639 19" || len(d.Links) != 70 {
		t.Errorf("70 cells: viewBox %q, %d links", d.ViewBox, len(d.Links))
	}
	if d.Links[69].Rect.X != 50 || d.Links[69].Rect.Y != 10 || d.Links[0].Title != "Node 0: unknown" {
		t.Errorf("cell 69 at %d,%d; cell 0 %q", d.Links[69].Rect.X, d.Links[69].Rect.Y, d.Links[0].Title)
	}
	// A pool whose range starts at 100 (issue #22): each title names the real node ID.
	d = parseMap(t, string(renderNodeMap(make([]mapCell, 3), 100, func(i int) string { return "?node=" + strconv.Itoa(100+i) }, "")))
	if d.Links[0].Title != "Node 100: unknown" || d.Links[2].Title != "Node 102: unknown" {
		t.Errorf("range from 100: titles %q, %q", d.Links[0].Title, d.Links[2].Title)
	}
	d = parseMap(t, string(renderNodeMap(nil, 0, func(i int) string { return "#" }, "x")))
	if len(d.Links) != 0 || d.ViewBox != "0 0 639 9" {
		t.Errorf("empty pool: viewBox %q, %d links", d.ViewBox, len(d.Links))
	}
}

func TestNodeMapLegend(t *testing.T) {
	labels, cues := map[string]bool{}, map[string]bool{}
	for _, s := range cellStatuses {
		sw := string(legendSwatch(s))
		var doc struct {
			Hidden string `xml:"aria-hidden,attr"`
		}
		if err := xml.Unmarshal([]byte(sw), &doc); err != nil || doc.Hidden != "true" {
			t.Errorf("%s: swatch %q: %v", s, sw, err)
		}
		if labels[s.Label()] || cues[s.Cue()] {
			t.Errorf("%s: label %q or cue %q is not distinct", s, s.Label(), s.Cue())
		}
		labels[s.Label()], cues[s.Cue()] = true, true
	}
	if cellGrace.Label() != "in grace (expired)" {
		t.Errorf("grace label %q", cellGrace.Label())
	}
}
