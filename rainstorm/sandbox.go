package rainstorm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ExecShimArg is the first argument that makes a binary run ExecShimMain
// instead of itself (the worker binary checks for it before anything else).
const ExecShimArg = "__rainstorm-exec"

// shimArgs are the arguments ExecShimMain reads before the program's argv.
func (l ExecLimits) shimArgs() []string {
	return []string{
		"cpu=" + strconv.FormatUint(l.CPUSeconds, 10),
		"as=" + strconv.FormatUint(l.MemoryBytes, 10),
		"nproc=" + strconv.FormatUint(l.Processes, 10),
		"--",
	}
}

// ExecShimMain is the exec shim: it sets the limits its arguments name
// (cpu=, as=, nproc=, then --) on itself and replaces itself with the
// program that follows, which inherits them before it runs a single
// instruction. Its environment is already the program's. It returns only
// on failure, with the exit code to use.
func ExecShimMain(args []string) int {
	var l ExecLimits
	for len(args) > 0 && args[0] != "--" {
		k, v, ok := strings.Cut(args[0], "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			fmt.Fprintf(os.Stderr, "rainstorm exec shim: bad argument %q\n", args[0])
			return 126
		}
		switch k {
		case "cpu":
			l.CPUSeconds = n
		case "as":
			l.MemoryBytes = n
		case "nproc":
			l.Processes = n
		default:
			fmt.Fprintf(os.Stderr, "rainstorm exec shim: unknown limit %q\n", k)
			return 126
		}
		args = args[1:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "rainstorm exec shim: no program after --")
		return 126
	}
	if err := l.apply(0); err != nil {
		fmt.Fprintf(os.Stderr, "rainstorm exec shim: %v\n", err)
		return 126
	}
	argv := args[1:]
	err := syscall.Exec(argv[0], argv, os.Environ())
	fmt.Fprintf(os.Stderr, "rainstorm exec shim: exec %s: %v\n", argv[0], err)
	return 127
}
