// Command failover measures how long Tempest takes to notice a crashed node
// and to replace a crashed leader, with real processes killed by SIGKILL.
//
// Every trial starts -nodes fresh node processes (this binary's hidden
// "node" subcommand), each running what a manager runs for membership and
// leadership: a transport.QUIC endpoint sealed with AUTH_SECRET, a swim.Node
// with gossip encryption derived from the same secret, and a leadership
// Elector over the QUIC transport with its term and vote in bbolt. The
// node's Lifeguard local health score is fed to the elector, as the roles
// will. Nodes report what they observe as JSON lines on stdout:
//
//	{"ev":"up","node":"n1","quic":"127.0.0.1:40001","swim":"127.0.0.1:40002","pid":123,"t":…}
//	{"ev":"join","node":"n2","t":…}              swim OnJoin
//	{"ev":"ready","n":3,"t":…}                   swim Join succeeded
//	{"ev":"dead","node":"n2","state":"dead","t":…}  swim OnDead
//	{"ev":"leader","leader":"n3","term":4,"t":…}  leadership OnLeaderChange ("" = none)
//	{"ev":"lhm","lhm":1,"t":…}                   local health score changed
//	{"ev":"suspect","node":"n2","t":…}           this node's probe of n2 failed
//	{"ev":"refute","node":"n1","t":…}            this node refuted n1's suspicion of it
//
// where t is the node's wall clock in Unix nanoseconds (all processes share
// the host's clock, so the driver can subtract its own kill time).
//
// The driver (the default mode) runs, per trial:
//
//  1. start the nodes and wait until every node has joined swim, sees all
//     the others alive, and all agree on one leader;
//  2. a steady-state window (-steady) in which nothing is wrong: any dead
//     event or leader change seen here is a false positive;
//  3. SIGKILL the leader (-kill leader, the default, which measures both
//     numbers), a follower (-kill follower) or alternately one and the other;
//  4. wait until every survivor has declared the victim dead and, when the
//     leader was killed, until every survivor follows one new leader in a
//     higher term, or until -timeout;
//  5. stop the survivors (SIGTERM, then SIGKILL after a grace period).
//
// detection = max over survivors of (its dead event for the victim − kill);
// failover = max over survivors of (the event in which it first followed
// the new leader − kill), i.e. the moment the last survivor agreed.
// Percentiles are nearest-rank: with 20 trials p99 is the maximum.
//
// -hog N starts N busy-loop processes for the whole run, so that both cores
// of the benchmark machine are saturated. -netns-loss P runs every node in
// its own network namespace, all linked through a bridge in one more
// namespace, and drops P% of the packets crossing the bridge (tc netem on
// the bridge ports, or an nftables "numgen random" rule where the kernel
// lacks netem). Namespaces, hogs and nodes are removed at the end, on
// Ctrl-C too; children also carry a parent-death signal.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	args := os.Args[1:]
	switch {
	case len(args) > 0 && args[0] == "node":
		err = runNode(ctx, args[1:])
	case len(args) > 0 && args[0] == "hog":
		err = runHog(ctx)
	default:
		err = runDriver(ctx, args)
	}
	if err != nil {
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "failover: %v\n", err)
		os.Exit(1)
	}
}

// errUsage is returned after a flag set has already printed its complaint.
var errUsage = errors.New("usage")
