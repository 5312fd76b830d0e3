package report

import "testing"

func TestTableMarkdown(t *testing.T) {
	tb := NewTable(Num("RTT ms"), Text("profile"), Num("Mbit/s"))
	tb.Addf("%.0f | %s | %.1f", 50.0, "modern", 239.14)
	tb.Add("0", "", "1")
	want := "| RTT ms | profile | Mbit/s |\n|---:|---|---:|\n| 50 | modern | 239.1 |\n| 0 |  | 1 |\n"
	if got := tb.Markdown(); got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
}
