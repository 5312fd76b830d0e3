// Package report renders an experiment's result the one way every
// experiment in bench/exp shares: a Markdown table (Table), a chart drawn
// with gonum/plot (Chart) and the files NAME.json, NAME.md and NAME.png
// (Write). An experiment only says what its rows, columns and series are.
package report
