package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"tempest/api"
)

// runMembers adds or removes a member of the group behind the API (a
// datacenter's managers when --api names managers, the gates when it names
// gates): one at a time, through the leader, with the API token. An added
// member is SYNCING until the leader promotes it.
func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "add" && args[0] != "remove") {
		fmt.Fprintln(stderr, "usage: tempest members add ID QUIC_ADDR | tempest members remove ID")
		return exitUsage
	}
	verb := args[0]
	want, synopsis := 2, "members add ID QUIC_ADDR [--json]"
	if verb == "remove" {
		want, synopsis = 1, "members remove ID [--json]"
	}
	fs := newFlagSet("members "+verb, synopsis, stderr)
	var conn apiFlags
	conn.register(fs)
	asJSON := fs.Bool("json", false, "print the group's configuration after the change as JSON")
	c, pos, code, ok := openCommand(fs, &conn, args[1:], want, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	var view *api.GroupView
	var err error
	if verb == "add" {
		mc := api.MemberChange{ID: pos[0], Addr: pos[1]}
		if err := mc.Check(); err != nil {
			fmt.Fprintf(stderr, "tempest: members add: %v\n", err)
			return exitUsage
		}
		view, err = c.AddMember(ctx, mc)
	} else {
		view, err = c.RemoveMember(ctx, pos[0])
	}
	if err != nil {
		return reportError(stderr, err)
	}
	if *asJSON {
		printJSON(stdout, view)
		return exitOK
	}
	printGroup(stdout, *view)
	return exitOK
}

// printGroup shows a group's configuration: its epoch and quorum, then each
// member with its state.
func printGroup(w io.Writer, g api.GroupView) {
	fmt.Fprintf(w, "%s: configuration epoch %d, quorum %d of %d voters\n", g.Name, g.Epoch, g.Quorum, voters(g))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MEMBER\tADDR\tVOTER\tSTATE")
	for _, m := range g.Members {
		voter := "no"
		if m.Voter {
			voter = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", m.ID, dash(m.Addr), voter, m.State)
	}
	_ = tw.Flush()
}

func voters(g api.GroupView) int {
	n := 0
	for _, m := range g.Members {
		if m.Voter {
			n++
		}
	}
	return n
}
