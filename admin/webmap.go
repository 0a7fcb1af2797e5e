package admin

import (
	"html/template"
	"strconv"
	"strings"
)

// The node map of the leases page: one cell per node ID of the pool, 64 to a
// row, drawn on the server as inline SVG. Every cell is a link to the node's
// detail with a <title> tooltip; its state shows as a colour and a shape (solid,
// a slash, a cross, a dot, an outline), so it reads without colour vision too.

// cellStatus is the state of one node ID on the map.
type cellStatus string

// The states of the map, in legend order.
const (
	cellFree        cellStatus = "free"        // allocatable and ready
	cellCooling     cellStatus = "cooling"     // allocatable, but its window opens later
	cellLeased      cellStatus = "leased"      // held by a lease that has not expired
	cellGrace       cellStatus = "grace"       // held by an expired lease not reclaimed yet
	cellQuarantined cellStatus = "quarantined" // free, not allocatable before its quarantine ends
)

// cellStatuses lists the states in legend order.
var cellStatuses = []cellStatus{cellLeased, cellGrace, cellQuarantined, cellCooling, cellFree}

// Label is the state's name as the pages show it: "in grace (expired)" for
// cellGrace.
func (s cellStatus) Label() string {
	switch s {
	case cellGrace:
		return "in grace (expired)"
	case "":
		return "unknown"
	}
	return string(s)
}

// Cue is the shape that tells the state apart without colour, as the legend
// words it.
func (s cellStatus) Cue() string {
	switch s {
	case cellLeased:
		return "solid"
	case cellGrace:
		return "slash"
	case cellQuarantined:
		return "cross"
	case cellCooling:
		return "dot"
	}
	return "outline"
}

// Meaning says what the state means for the next Alloc, as the node detail
// words it.
func (s cellStatus) Meaning() string {
	switch s {
	case cellFree:
		return "No lease holds it; an Alloc may be granted it at once."
	case cellCooling:
		return "No lease holds it; an Alloc may be granted it, and its holder waits for the window to open."
	case cellLeased:
		return "A lease holds it."
	case cellGrace:
		return "Its lease has expired; cleanup frees it after the grace period unless its holder renews first."
	case cellQuarantined:
		return "No lease holds it, and no Alloc is granted it before its quarantine ends."
	}
	return ""
}

// class is the CSS class of the state's cells (admin.css styles them).
func (s cellStatus) class() string {
	switch s {
	case cellLeased:
		return "l"
	case cellGrace:
		return "g"
	case cellQuarantined:
		return "q"
	case cellCooling:
		return "c"
	}
	return "f"
}

// mapCell is one node ID on the map.
type mapCell struct {
	Status cellStatus
	// Tip is the tooltip and accessible name of the cell's link, e.g. "Node 7:
	// leased by host-a pid 42 until 10:00:00Z". Empty: "Node N: <status>".
	Tip string
}

// Geometry of the map, in SVG user units: a cell is mapCellSize square, with a
// gap of one unit to its neighbours.
const (
	mapColumns  = 64
	mapCellSize = 10
)

// renderNodeMap draws cells (cells[i] is node ID first+i: the pool's node range,
// issue #22) as an SVG map, 64 to a row; a cell's title names its real node ID.
// link returns the href of cell i (node ID first+i). labelledBy is the id of the element
// that names the map (its heading). Free cells are left out of the tab order (the
// list and the "go to node" form reach every node); the others are tab stops.
func renderNodeMap(cells []mapCell, first int, link func(i int) string, labelledBy string) template.HTML {
	rows := (len(cells) + mapColumns - 1) / mapColumns
	if rows == 0 {
		rows = 1
	}
	width, height := mapColumns*mapCellSize-1, rows*mapCellSize-1
	var b strings.Builder
	b.Grow(len(cells)*96 + 1024)
	b.WriteString(`<svg class="nodemap" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 `)
	b.WriteString(strconv.Itoa(width))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(height))
	b.WriteString(`" preserveAspectRatio="xMinYMin meet"`)
	if labelledBy != "" {
		b.WriteString(` aria-labelledby="`)
		b.WriteString(template.HTMLEscapeString(labelledBy))
		b.WriteByte('"')
	}
	b.WriteString(`>`)
	b.WriteString(mapPatterns)
	for i, c := range cells {
		x, y := (i%mapColumns)*mapCellSize, (i/mapColumns)*mapCellSize
		b.WriteString(`<a href="`)
		b.WriteString(template.HTMLEscapeString(link(i)))
		b.WriteByte('"')
		if c.Status == cellFree || c.Status == "" {
			b.WriteString(` tabindex="-1"`)
		}
		b.WriteString(`><title>`)
		if c.Tip != "" {
			b.WriteString(template.HTMLEscapeString(c.Tip))
		} else {
			b.WriteString("Node ")
			b.WriteString(strconv.Itoa(first + i))
			b.WriteString(": ")
			b.WriteString(c.Status.Label())
		}
		b.WriteString(`</title><rect class="`)
		b.WriteString(c.Status.class())
		b.WriteString(`" x="`)
		b.WriteString(strconv.Itoa(x))
		b.WriteString(`" y="`)
		b.WriteString(strconv.Itoa(y))
		b.WriteString(`" width="9" height="9"/></a>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// mapPatterns are the fills of the states that carry a shape: a slash for in
// grace, a cross for quarantined, a dot for cooling. The patterns repeat every
// cell, so each cell shows its shape whole. The colours are admin.css's.
const mapPatterns = `<defs>` +
	`<pattern id="nm-g" width="10" height="10" patternUnits="userSpaceOnUse">` +
	`<rect width="10" height="10" fill="#a64b00"/><path d="M0.5 8.5L8.5 0.5" stroke="#fff" stroke-width="1.6"/></pattern>` +
	`<pattern id="nm-q" width="10" height="10" patternUnits="userSpaceOnUse">` +
	`<rect width="10" height="10" fill="#b00020"/><path d="M1.5 1.5L7.5 7.5M7.5 1.5L1.5 7.5" stroke="#fff" stroke-width="1.4"/></pattern>` +
	`<pattern id="nm-c" width="10" height="10" patternUnits="userSpaceOnUse">` +
	`<rect width="10" height="10" fill="#2b7a8c"/><circle cx="4.5" cy="4.5" r="2" fill="#fff"/></pattern>` +
	`</defs>`

// legendSwatch draws the small SVG of one state for the legend: the same shape
// as its cells, larger. It is decorative (the legend's text names the state).
func legendSwatch(s cellStatus) template.HTML {
	var inner string
	switch s {
	case cellLeased:
		inner = `<rect class="l" x="0.5" y="0.5" width="17" height="17"/>`
	case cellGrace:
		inner = `<rect x="0.5" y="0.5" width="17" height="17" fill="#a64b00"/><path d="M2 16L16 2" stroke="#fff" stroke-width="2.5"/>`
	case cellQuarantined:
		inner = `<rect x="0.5" y="0.5" width="17" height="17" fill="#b00020"/><path d="M4 4L14 14M14 4L4 14" stroke="#fff" stroke-width="2.5"/>`
	case cellCooling:
		inner = `<rect x="0.5" y="0.5" width="17" height="17" fill="#2b7a8c"/><circle cx="9" cy="9" r="4" fill="#fff"/>`
	default:
		inner = `<rect class="f" x="0.5" y="0.5" width="17" height="17"/>`
	}
	return template.HTML(`<svg class="swatch" viewBox="0 0 18 18" width="18" height="18" aria-hidden="true" focusable="false">` + inner + `</svg>`)
}
