package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fenceproxy/fenceproxy/config"
)

const helpUsage = "usage: fenceproxy help [--markdown]\n\n" +
	"Prints the commands and every FENCE_* variable with its default; --markdown prints\n" +
	"the variables as the README's configuration table.\n\nflags:"

// help is the help subcommand: the usage, then the variables, from the
// definitions config.Load reads (config.Variables).
func help(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("help", flag.ContinueOnError)
	markdown := fs.Bool("markdown", false, "print the variables as a Markdown table (the README's)")
	if helped, err := parseFlags(fs, args, helpUsage, stdout); helped || err != nil {
		return err
	}
	if *markdown {
		_, err := io.WriteString(stdout, variablesMarkdown())
		return err
	}
	fmt.Fprintln(stdout, usage)
	fmt.Fprintln(stdout, "\nVariables (default, meaning):")
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, v := range config.Variables() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, v.Default, v.Help)
	}
	return tw.Flush()
}

// variablesMarkdown is the README's configuration table.
func variablesMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, v := range config.Variables() {
		def := v.Default
		if !strings.HasPrefix(def, "(") {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, v.Help)
	}
	return b.String()
}
