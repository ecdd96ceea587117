package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The operator's commands: `fenceproxy store init` and `fenceproxy marks
// get|list|raise|reset`. They read the same environment as serve (the store
// variables and FENCE_KEY_PREFIX; the upstream is not needed), print what
// they did on stdout (text, or JSON with -o json), and log one JSON audit
// line per change on stderr. With bolt the file is locked by a running
// proxy: stop it first.

const storeUsage = `usage: fenceproxy store init [--force]

Writes the store's identity record. Without --force only on a store that has
none. With --force only on a lost store: one with no record, or one a replica
marked lost (it found the store emptied, replaced or gone back in time), or
one an operator forced before; a store whose record is intact is refused.
Every replica that found the store lost, or meets the new record later, takes
it up and admits again: first raise every mark to the lease service's current
tokens (fenceproxy marks raise), or stale holders are admitted.`

const marksUsage = `usage: fenceproxy marks get RESOURCE
       fenceproxy marks list [PREFIX]
       fenceproxy marks raise RESOURCE TOKEN[:SEQUENCE]
       fenceproxy marks reset RESOURCE [TOKEN[:SEQUENCE]] --force

get prints a resource's mark; list every mark whose resource begins with
PREFIX (paged through the store: SCAN on Redis, a cursor on bolt); raise moves
a mark forward only; reset sets it to any value, or deletes it without a
token, and needs --force (a mark moved backward admits stale holders again).
Flags may come before or after the arguments: fenceproxy marks reset orders/42 7 --force`

// storeCmd runs `fenceproxy store ...`.
func storeCmd(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "init" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stdout, storeUsage)
			return nil
		}
		return &usageError{storeUsage}
	}
	fs := flag.NewFlagSet("store init", flag.ContinueOnError)
	force := fs.Bool("force", false, "replace the identity record of a lost store (no record, or one a replica marked lost), or one an operator forced before")
	output := fs.String("o", "text", "output: text or json")
	if helped, err := parseFlags(fs, args[1:], storeUsage, stdout); helped || err != nil {
		return err
	}
	if fs.NArg() > 0 || (*output != "text" && *output != "json") {
		return &usageError{flagsUsage(fs, storeUsage)}
	}
	return withKeeper(ctx, environ, stderr, func(k fencestore.Keeper, audit *zap.Logger) error {
		old, err := k.Identity(ctx)
		if err != nil {
			return err
		}
		id, err := k.Init(ctx, *force)
		switch {
		case errors.Is(err, fencestore.ErrIdentityExists) && fencestore.IsLostRecord(old):
			return fmt.Errorf("store init: the store is marked lost (%s) by a replica that found it emptied, replaced or gone back in time; "+
				"raise the marks to the lease service's current tokens (fenceproxy marks raise), then add --force", old)
		case errors.Is(err, fencestore.ErrIdentityExists):
			return fmt.Errorf("store init: the store already has the identity record %s, and it is intact: nothing to do", old)
		case errors.Is(err, fencestore.ErrNotLost):
			return fmt.Errorf("store init --force: refused: the store is not lost (its identity record %s is intact, and no replica "+
				"marked it lost); a new record would only make every replica refuse it. To move one mark back, use "+
				"fenceproxy marks reset --force", old)
		}
		if err != nil {
			return err
		}
		audit.Info("audit", zap.String("op", "store init"), zap.String("old", old), zap.String("new", id), zap.Bool("force", *force))
		return printOut(stdout, *output, map[string]string{"identity": id, "replaced": old},
			func(w io.Writer) {
				if old == "" {
					fmt.Fprintf(w, "identity %s written\n", id)
				} else {
					fmt.Fprintf(w, "identity %s written, replacing %s\n", id, old)
				}
			})
	})
}

// marksCmd runs `fenceproxy marks ...`.
func marksCmd(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{marksUsage}
	}
	op, args := args[0], args[1:]
	if op == "-h" || op == "--help" || op == "help" {
		fmt.Fprintln(stdout, marksUsage)
		return nil
	}
	fs := flag.NewFlagSet("marks "+op, flag.ContinueOnError)
	output := fs.String("o", "text", "output: text or json")
	force := fs.Bool("force", false, "reset: allow moving a mark backward or deleting it")
	if helped, err := parseFlags(fs, args, marksUsage, stdout); helped || err != nil {
		return err
	}
	args = fs.Args()
	if *output != "text" && *output != "json" {
		return &usageError{"-o must be text or json\n" + marksUsage}
	}
	want := map[string][2]int{"get": {1, 1}, "list": {0, 1}, "raise": {2, 2}, "reset": {1, 2}}
	n, ok := want[op]
	if !ok {
		return &usageError{fmt.Sprintf("unknown marks command %q\n%s", op, marksUsage)}
	}
	if len(args) < n[0] || len(args) > n[1] {
		return &usageError{fmt.Sprintf("marks %s: wrong number of arguments\n%s", op, marksUsage)}
	}
	if op != "list" && args[0] == "" {
		return &usageError{fmt.Sprintf("marks %s: RESOURCE is empty (no resource has an empty name)\n%s", op, marksUsage)}
	}
	var value *fencestore.Mark
	if (op == "raise" || op == "reset") && len(args) == 2 {
		m, ok := fencestore.ParseMarkValue(args[1])
		if !ok {
			return &usageError{fmt.Sprintf("marks %s: %q is not TOKEN or TOKEN:SEQUENCE (canonical decimal uint64s)", op, args[1])}
		}
		value = &m
	}
	if op == "reset" && !*force {
		return &usageError{"marks reset moves a mark backward or deletes it, which admits stale holders again: add --force\n" + marksUsage}
	}
	return withKeeper(ctx, environ, stderr, func(k fencestore.Keeper, audit *zap.Logger) error {
		switch op {
		case "get":
			m, ok, err := k.Get(ctx, args[0])
			if err != nil {
				return err
			}
			return printOut(stdout, *output, markJSON(args[0], m, ok), func(w io.Writer) {
				fmt.Fprintf(w, "%s %s\n", args[0], markText(m, ok))
			})
		case "list":
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return listMarks(ctx, k, prefix, *output, stdout)
		case "raise":
			old, had, changed, err := k.Raise(ctx, args[0], *value)
			if err != nil {
				return err
			}
			if changed {
				audit.Info("audit", zap.String("op", "marks raise"), zap.String("resource", args[0]),
					zap.String("old", markText(old, had)), zap.String("new", markText(*value, true)))
			}
			out := markJSON(args[0], *value, true)
			out["old"], out["changed"] = markText(old, had), fmt.Sprint(changed)
			return printOut(stdout, *output, out, func(w io.Writer) {
				if changed {
					fmt.Fprintf(w, "%s %s -> %s\n", args[0], markText(old, had), markText(*value, true))
				} else {
					fmt.Fprintf(w, "%s %s unchanged: already at or above %s (raise never moves a mark backward; see reset)\n",
						args[0], markText(old, had), markText(*value, true))
				}
			})
		default: // reset
			old, had, err := k.Reset(ctx, args[0], value)
			if err != nil {
				return err
			}
			now := markText(fencestore.Mark{}, false)
			if value != nil {
				now = markText(*value, true)
			}
			audit.Info("audit", zap.String("op", "marks reset"), zap.String("resource", args[0]),
				zap.String("old", markText(old, had)), zap.String("new", now))
			out := map[string]string{"resource": args[0], "old": markText(old, had), "new": now}
			return printOut(stdout, *output, out, func(w io.Writer) {
				fmt.Fprintf(w, "%s %s -> %s\n", args[0], markText(old, had), now)
			})
		}
	})
}

// listPage is how many marks one page of a listing asks the store for.
const listPage = 500

func listMarks(ctx context.Context, k fencestore.Keeper, prefix, output string, stdout io.Writer) error {
	cursor, n := "", 0
	for {
		page, next, err := k.List(ctx, prefix, cursor, listPage)
		if err != nil {
			return err
		}
		for _, e := range page {
			n++
			if output == "json" {
				b, _ := json.Marshal(markJSON(e.Resource, e.Mark, true))
				fmt.Fprintf(stdout, "%s\n", b)
			} else {
				fmt.Fprintf(stdout, "%s %s\n", e.Resource, markText(e.Mark, true))
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if output == "text" && n == 0 {
		fmt.Fprintf(stdout, "no marks under %q\n", prefix)
	}
	return nil
}

// withKeeper opens the store the environment names and runs fn with its
// operator side and the audit logger.
func withKeeper(ctx context.Context, environ map[string]string, stderr io.Writer, fn func(fencestore.Keeper, *zap.Logger) error) error {
	cfg, err := loadOperatorConfig(environ)
	if err != nil {
		return err
	}
	log := newLogger(zapcore.InfoLevel, stderr)
	defer func() { _ = log.Sync() }()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := openStore(ctx, cfg, log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)), prometheus.NewRegistry(), 0, nil)
	if err != nil {
		return err
	}
	defer func() { _ = st.store.Close() }()
	if st.keeper == nil {
		return fmt.Errorf("FENCE_STORE=%s: this store has no operator commands yet", cfg.Store)
	}
	return fn(st.keeper, log)
}

// loadOperatorConfig is loadConfig for commands that never reach the
// upstream: FENCE_UPSTREAM_URL may be left out.
func loadOperatorConfig(environ map[string]string) (*config.Config, error) {
	env := make(map[string]string, len(environ)+1)
	for k, v := range environ {
		env[k] = v
	}
	if env["FENCE_UPSTREAM_URL"] == "" {
		env["FENCE_UPSTREAM_URL"] = "http://127.0.0.1:1" // never dialled
	}
	return loadConfig(env)
}

// markText spells a mark as the store keeps it ("42", "42:7"), or "(none)".
func markText(m fencestore.Mark, ok bool) string {
	if !ok {
		return "(none)"
	}
	return string(m.AppendValue(nil))
}

// markJSON is a mark in JSON: numbers as decimal strings, as everywhere.
func markJSON(resource string, m fencestore.Mark, ok bool) map[string]string {
	out := map[string]string{"resource": resource}
	if ok {
		out["mark"] = fmt.Sprint(m.Token)
		if m.HasSequence {
			out["sequence"] = fmt.Sprint(m.Sequence)
		}
	}
	return out
}

func printOut(w io.Writer, output string, v any, text func(io.Writer)) error {
	if output == "json" {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	text(w)
	return nil
}
