package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes v as dir/NAME.json, md as NAME.md and, if chart is not nil,
// the chart as NAME.png, creating dir if need be.
func Write(dir, name string, v any, md string, chart *Chart) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output folder: %w", err)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s.json: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	if chart == nil {
		return nil
	}
	return chart.Save(filepath.Join(dir, name+".png"))
}
