package shim

import (
	"slices"
	"strings"
	"testing"
)

// Which calls of a warm build the shim records, and how it changes them.
func TestPlanWarm(t *testing.T) {
	const added = jsonFormat
	for _, c := range []struct {
		args         string
		record       bool
		unobservable string // a part of the reason
		json         bool
		ran          string // the arguments cargo gets, when they change
	}{
		{args: "build", record: true, ran: "build " + added},
		{args: "build --release -- -x", record: true, ran: "build " + added + " --release -- -x"},
		{args: "+nightly -Zbuild-dir-new-layout build", record: true, ran: "+nightly -Zbuild-dir-new-layout build " + added},
		{args: "-q --locked --color always --config build.jobs=1 -Z x check --workspace", record: true,
			ran: "-q --locked --color always --config build.jobs=1 -Z x check " + added + " --workspace"},
		{args: "-vv test --no-run", record: true, ran: "-vv test " + added + " --no-run"},
		{args: "clippy --workspace --all-targets -- -D warnings", record: true, ran: "clippy " + added + " --workspace --all-targets -- -D warnings"},
		{args: "run -- --message-format=human", record: true, ran: "run " + added + " -- --message-format=human"},
		{args: "doc", record: true, ran: "doc " + added},
		{args: "build --message-format=json", record: true, json: true},
		{args: "build --message-format json-diagnostic-short", record: true, json: true},
		{args: "check --message-format=short,json", record: true, json: true},
		{args: "build --message-format=human", record: true, unobservable: "human"},
		{args: "build --message-format short", record: true, unobservable: "short"},
		{args: "b", record: true, unobservable: `"b"`},
		{args: "nextest run", record: true, unobservable: `"nextest"`},
		{args: "install ripgrep", record: true, unobservable: `"install"`},
		{args: "--frobnicate build", record: true, unobservable: "--frobnicate"},
		{args: "metadata --format-version 1"},
		{args: "locate-project --workspace"},
		{args: "clean"},
		{args: "--version"},
		{args: "-V"},
		{args: ""},
	} {
		args := strings.Fields(c.args)
		p := planWarm(args)
		if p.record != c.record || p.json != c.json || !strings.Contains(p.unobservable, c.unobservable) || (c.unobservable == "") != (p.unobservable == "") {
			t.Errorf("cargo %s: record %v, json %v, unobservable %q; want %v, %v, %q", c.args, p.record, p.json, p.unobservable, c.record, c.json, c.unobservable)
		}
		want := args
		if c.ran != "" {
			want = strings.Fields(c.ran)
		}
		if !slices.Equal(p.args, want) {
			t.Errorf("cargo %s: runs cargo %q, want %q", c.args, p.args, want)
		}
	}
}
