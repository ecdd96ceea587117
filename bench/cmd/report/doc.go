// Command report turns the raw rows of bench/compare.sh and bench/sweep.sh
// into medians, ratios and summary lines, and writes docs/performance.md from
// one run of bench/run-all.sh.
//
//	report compare -in compare-none.tsv -setting none -stale ok [-lua-check ok]
//	report sweep -in sweep.tsv -out docs/performance-data.tsv
//	report doc -run DIR -out docs/performance.md
//
// The doc's text is performance.md.tmpl (embedded); document.go computes
// what it says from the run's files (read in run.go), and the golden files
// under testdata/ show any change to its output.
package main
