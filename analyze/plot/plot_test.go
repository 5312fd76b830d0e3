package plot

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wanopt/wanopt/analyze"
)

func TestFlowPNGAndSVG(t *testing.T) {
	rep, err := analyze.AnalyzeFile(filepath.Join("..", "testdata", "window-limited.pcap"), analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, format := range []string{"png", "svg"} {
		path, err := FlowFile(dir, format, &rep.Flows[0])
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !strings.HasSuffix(path, "flow1."+format) {
			t.Errorf("path %s", path)
		}
	}
	var b bytes.Buffer
	if err := Flow(&b, "gif", &rep.Flows[0]); err == nil {
		t.Error("gif accepted")
	}
}
