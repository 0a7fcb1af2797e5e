package discord

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func runes(s string) int { return utf8.RuneCountInString(s) }

func embedChars(m Message) int {
	n := 0
	for _, e := range m.Embeds {
		n += runes(e.Title) + runes(e.Description)
		for _, f := range e.Fields {
			n += runes(f.Name) + runes(f.Value)
		}
		if e.Footer != nil {
			n += runes(e.Footer.Text)
		}
	}
	return n
}

func TestFitUnchangedWhenWithinLimits(t *testing.T) {
	m := Message{Content: "héllo", Embeds: []Embed{{Title: "t", Description: "d", Fields: []Field{{Name: "n", Value: "v", Inline: true}}, Footer: &Footer{Text: "f"}}}}
	if got := m.Fit(); !reflect.DeepEqual(got, m) {
		t.Fatalf("Fit changed a message within limits:\n got %+v\nwant %+v", got, m)
	}
}

func TestFitContentCountsRunes(t *testing.T) {
	m := Message{Content: strings.Repeat("é", MaxContent)} // 4000 bytes, 2000 chars: fits
	if got := m.Fit().Content; got != m.Content {
		t.Fatalf("2000 two-byte runes were cut to %d runes", runes(got))
	}
	m.Content = strings.Repeat("日", 2500)
	got := m.Fit().Content
	if runes(got) != MaxContent || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("content: %d runes, valid=%v, suffix …=%v", runes(got), utf8.ValidString(got), strings.HasSuffix(got, "…"))
	}
}

func TestFitEmbedLimits(t *testing.T) {
	var fields []Field
	for i := range 30 {
		fields = append(fields, Field{Name: fmt.Sprint("n", i), Value: "v"})
	}
	long := Embed{
		Title:       strings.Repeat("ü", 300),
		Description: strings.Repeat("x", 5000),
		Fields:      fields,
	}
	m := Message{Embeds: []Embed{long}}
	orig := len(m.Embeds[0].Fields)
	e := m.Fit().Embeds[0]
	if runes(e.Title) != MaxTitle || !strings.HasSuffix(e.Title, "…") {
		t.Errorf("title: %d runes", runes(e.Title))
	}
	// Title 256 + fields leave 6000-256 for the description, which is cut to 4096.
	if runes(e.Description) != MaxDescription {
		t.Errorf("description: %d runes", runes(e.Description))
	}
	if len(e.Fields) != MaxFields {
		t.Fatalf("fields: %d, want %d", len(e.Fields), MaxFields)
	}
	if last := e.Fields[MaxFields-1]; last.Value != "and 6 more fields" {
		t.Errorf("last field = %+v, want \"and 6 more fields\"", last)
	}
	if len(m.Embeds[0].Fields) != orig || runes(m.Embeds[0].Title) != 300 {
		t.Error("Fit modified its input")
	}

	f := Message{Embeds: []Embed{{Fields: []Field{{Name: strings.Repeat("n", 300), Value: strings.Repeat("v", 2000)}}}}}.Fit().Embeds[0].Fields[0]
	if runes(f.Name) != MaxFieldName || runes(f.Value) != MaxFieldValue {
		t.Errorf("field name %d, value %d runes", runes(f.Name), runes(f.Value))
	}
}

func TestFitEmbedCountAndTotal(t *testing.T) {
	var many []Embed
	for i := range 12 {
		many = append(many, Embed{Title: fmt.Sprint("e", i)})
	}
	if got := len(Message{Embeds: many}.Fit().Embeds); got != MaxEmbeds {
		t.Errorf("embeds: %d, want %d", got, MaxEmbeds)
	}

	big := []Embed{
		{Title: "a", Description: strings.Repeat("é", 4000)},
		{Title: "b", Description: strings.Repeat("é", 4000)},
		{Title: "c", Description: strings.Repeat("é", 4000)},
	}
	got := Message{Embeds: big}.Fit()
	if n := embedChars(got); n > MaxEmbedTotal {
		t.Fatalf("total embed text %d > %d", n, MaxEmbedTotal)
	}
	if len(got.Embeds) != 2 || runes(got.Embeds[0].Description) != 4000 || !strings.HasSuffix(got.Embeds[1].Description, "…") {
		t.Errorf("embeds after total cut: %d, first desc %d runes", len(got.Embeds), runes(got.Embeds[0].Description))
	}
}

func TestCutList(t *testing.T) {
	lines := []string{"one", "two", "three"}
	if got := CutList(lines, 100); got != "one\ntwo\nthree" {
		t.Errorf("fits: %q", got)
	}
	if got := CutList(lines, len("one\ntwo\nthree")); got != "one\ntwo\nthree" {
		t.Errorf("exact fit: %q", got)
	}

	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("line %d", i))
	}
	got := CutList(many, 60)
	if runes(got) > 60 {
		t.Fatalf("%d runes > 60: %q", runes(got), got)
	}
	parts := strings.Split(got, "\n")
	kept := len(parts) - 1
	want := fmt.Sprintf("… and %d more", 100-kept)
	if parts[kept] != want || kept == 0 {
		t.Fatalf("got %q, want %d lines then %q", got, kept, want)
	}
	if more := strings.Join(many[:kept+1], "\n") + "\n" + fmt.Sprintf("… and %d more", 100-kept-1); runes(more) <= 60 {
		t.Errorf("one more line would have fitted: %q", more)
	}

	// Multi-byte runes count as one character each.
	wide := []string{strings.Repeat("é", 10), strings.Repeat("é", 10), strings.Repeat("é", 10)}
	if got := CutList(wide, 32); got != strings.Join(wide, "\n") {
		t.Errorf("32 runes (62 bytes) should fit in 32: %q", got)
	}
	if got := CutList(wide, 30); got != wide[0]+"\n"+wide[1]+"\n… and 1 more" && got != wide[0]+"\n… and 2 more" {
		t.Errorf("cut wide: %q", got)
	} else if runes(got) > 30 {
		t.Errorf("cut wide: %d runes", runes(got))
	}

	if got := CutList(many, 5); runes(got) > 5 {
		t.Errorf("tiny max: %q", got)
	}
	if got := CutList(nil, 10); got != "" {
		t.Errorf("nil: %q", got)
	}
}
