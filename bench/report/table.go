package report

import (
	"fmt"
	"strings"
)

// Column is one column of a Table: its header and whether its cells are
// left-aligned (text) rather than right-aligned (figures).
type Column struct {
	Name string
	Left bool
}

// Num is a right-aligned column; Text a left-aligned one.
func Num(name string) Column  { return Column{Name: name} }
func Text(name string) Column { return Column{Name: name, Left: true} }

// Table is a Markdown table; each row holds one cell per column.
type Table struct {
	Columns []Column
	rows    [][]string
}

// NewTable starts a table with these columns.
func NewTable(cols ...Column) *Table { return &Table{Columns: cols} }

// Add appends a row of cells.
func (t *Table) Add(cells ...string) { t.rows = append(t.rows, cells) }

// Addf appends a row whose cells are format's "|"-separated fields, each
// trimmed, so a row reads like the table it makes.
func (t *Table) Addf(format string, args ...any) {
	cells := strings.Split(fmt.Sprintf(format, args...), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	t.Add(cells...)
}

// Markdown is the table: header, alignment row, then the rows.
func (t *Table) Markdown() string {
	var b strings.Builder
	t.WriteTo(&b)
	return b.String()
}

// WriteTo writes the Markdown table to b.
func (t *Table) WriteTo(b *strings.Builder) {
	names := make([]string, len(t.Columns))
	aligns := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
		aligns[i] = "---:"
		if c.Left {
			aligns[i] = "---"
		}
	}
	b.WriteString("| " + strings.Join(names, " | ") + " |\n")
	b.WriteString("|" + strings.Join(aligns, "|") + "|\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
}
