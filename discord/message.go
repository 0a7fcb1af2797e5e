package discord

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Discord's limits on a webhook message, counted in characters (runes), not bytes.
const (
	MaxContent          = 2000
	MaxEmbeds           = 10
	MaxTitle            = 256
	MaxDescription      = 4096
	MaxFields           = 25
	MaxFieldName        = 256
	MaxFieldValue       = 1024
	MaxFooter           = 2048
	MaxEmbedTotal       = 6000 // title, description, field names and values, footer, over all embeds
	ellipsis            = "…"
	moreFieldsFieldName = "…"
)

// Message is a webhook message. Send always adds allowed_mentions with an empty
// parse list, so no message pings @everyone, @here, a role or a user.
type Message struct {
	Content string  `json:"content,omitempty"`
	Embeds  []Embed `json:"embeds,omitempty"`
}

// Embed is a rich embed. Color is 0xRRGGBB; Timestamp is RFC 3339 or empty.
type Embed struct {
	Title       string  `json:"title,omitempty"`
	Description string  `json:"description,omitempty"`
	URL         string  `json:"url,omitempty"`
	Color       int     `json:"color,omitempty"`
	Timestamp   string  `json:"timestamp,omitempty"`
	Fields      []Field `json:"fields,omitempty"`
	Footer      *Footer `json:"footer,omitempty"`
}

// Field is one name/value pair of an embed. Discord rejects empty names and values.
type Field struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Inline bool   `json:"inline,omitempty"`
}

// Footer is the small text at the bottom of an embed.
type Footer struct {
	Text string `json:"text"`
}

// Fit returns a copy of m within Discord's limits; m is not modified. Text over
// its limit is cut and ends in "…"; embeds beyond MaxEmbeds are dropped; fields
// beyond MaxFields are replaced by a last field named "…" with the value "and N more
// fields". When the
// embeds together exceed MaxEmbedTotal characters, text is cut in order (title,
// description, fields, footer of the first embed, then the next) and embeds or
// fields left with nothing are dropped. A message that already fits is returned
// unchanged.
func (m Message) Fit() Message {
	out := Message{Content: truncate(m.Content, MaxContent)}
	embeds := m.Embeds
	if len(embeds) > MaxEmbeds {
		embeds = embeds[:MaxEmbeds]
	}
	budget := MaxEmbedTotal
	take := func(s string, limit int) string {
		s = truncate(s, min(limit, budget))
		budget -= utf8.RuneCountInString(s)
		return s
	}
	for _, e := range embeds {
		if budget <= 0 {
			break
		}
		f := e
		f.Title = take(e.Title, MaxTitle)
		f.Description = take(e.Description, MaxDescription)
		fields := e.Fields
		var more int
		if len(fields) > MaxFields {
			more = len(fields) - (MaxFields - 1)
			fields = fields[:MaxFields-1]
		}
		f.Fields = nil
		for i, fl := range fields {
			name := take(fl.Name, MaxFieldName)
			value := take(fl.Value, MaxFieldValue)
			if name == "" || value == "" {
				// Out of budget (or an empty field Discord would reject):
				// count this field and the rest as not shown.
				more += len(fields) - i
				break
			}
			f.Fields = append(f.Fields, Field{Name: name, Value: value, Inline: fl.Inline})
		}
		if more > 0 {
			value := "and " + strconv.Itoa(more) + " more fields"
			if utf8.RuneCountInString(moreFieldsFieldName)+utf8.RuneCountInString(value) <= budget {
				f.Fields = append(f.Fields, Field{Name: take(moreFieldsFieldName, MaxFieldName), Value: take(value, MaxFieldValue)})
			}
		}
		if e.Footer != nil {
			if t := take(e.Footer.Text, MaxFooter); t != "" {
				f.Footer = &Footer{Text: t}
			} else {
				f.Footer = nil
			}
		}
		if embedEmpty(f) && !embedEmpty(e) {
			break // nothing of this embed survived the budget
		}
		out.Embeds = append(out.Embeds, f)
	}
	return out
}

func embedEmpty(e Embed) bool {
	return e.Title == "" && e.Description == "" && len(e.Fields) == 0 && e.Footer == nil
}

// truncate returns s cut to at most n runes; a cut string ends in "…".
func truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return s[:i] + ellipsis
}

// CutList joins lines with "\n" and returns the result if it is at most max
// characters (runes). Otherwise it keeps as many leading lines as fit together
// with a last line "… and N more", N being the number of lines left out. When
// not even that line fits, the result is that line cut to max characters.
// Use it to build a description or field value from a long list.
func CutList(lines []string, max int) string {
	joined := strings.Join(lines, "\n")
	if utf8.RuneCountInString(joined) <= max {
		return joined
	}
	suffix := func(rest int) string { return ellipsis + " and " + strconv.Itoa(rest) + " more" }
	// used is the rune length of the first k lines joined with "\n".
	best, used := 0, 0
	for k := 1; k < len(lines); k++ {
		used += utf8.RuneCountInString(lines[k-1])
		if k > 1 {
			used++ // the "\n" before line k
		}
		if used+1+utf8.RuneCountInString(suffix(len(lines)-k)) > max {
			break
		}
		best = k
	}
	if best == 0 {
		return truncate(suffix(len(lines)), max)
	}
	return strings.Join(lines[:best], "\n") + "\n" + suffix(len(lines)-best)
}
