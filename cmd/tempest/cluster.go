package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// runCluster shows the nodes the answering node knows: role, datacenter,
// health, leadership, cores, key ids (to follow a secret rotation) and
// open circuit breakers; then the election groups it belongs to, with
// their configured members, epoch and each member's state.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cluster", "cluster [--json]", stderr)
	var conn apiFlags
	conn.register(fs)
	asJSON := fs.Bool("json", false, "print the cluster view as JSON")
	c, _, code, ok := openCommand(fs, &conn, args, 0, stderr)
	if !ok {
		return code
	}
	defer c.Close()
	view, err := c.Cluster(ctx)
	if err != nil {
		return reportError(stderr, err)
	}
	if *asJSON {
		printJSON(stdout, view)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tDC\tSTATE\tLEADER\tCORES\tKEYS\tOPEN BREAKERS")
	for _, n := range view.Nodes {
		leader := ""
		if n.IsLeader {
			leader = "*"
			if n.Term > 0 {
				leader = fmt.Sprintf("* (term %d)", n.Term)
			}
		}
		cores := "-"
		if n.TotalCores > 0 {
			cores = fmt.Sprintf("%d/%d", n.AvailableCores, n.TotalCores)
		}
		state := dash(n.State)
		if n.Load != "" && n.Load != "NORMAL" {
			state += " (load " + n.Load + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, dash(n.DC), state, leader,
			cores, formatKeys(n.SendKey, n.AcceptKeys), dash(strings.Join(n.OpenBreakers, ",")))
	}
	_ = tw.Flush()
	for _, g := range view.Groups {
		fmt.Fprintln(stdout)
		printGroup(stdout, g)
	}
	// A partial view says so: a gate that could not ask a datacenter for
	// its workers lists none there, which is not the same as having none.
	for _, u := range view.Unreachable {
		fmt.Fprintf(stderr, "not shown: %s\n", u)
	}
	return exitOK
}

// formatKeys shows the key a node sends with, then any other key it still
// accepts: "ab12" in steady state, "cd34 +ab12" mid-rotation.
func formatKeys(send string, accept []string) string {
	var others []string
	for _, k := range accept {
		if k != send && !slices.Contains(others, k) {
			others = append(others, k)
		}
	}
	s := dash(send)
	if len(others) > 0 {
		s += " +" + strings.Join(others, ",+")
	}
	return s
}
