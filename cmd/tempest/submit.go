package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"tempest/internal/jobfile"
)

// runSubmit sends a job file. Without --wait it prints the job id alone,
// for scripts: `id=$(tempest submit job.yaml)`. With --wait it follows the
// job to its end and exits as exitFor says (0 completed, 1 thresholds
// failed, 2 failed otherwise).
func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("submit", "submit FILE [--wait] [--json] [--allow-outside] [--env NAME=VALUE] [--secret NAME=VALUE]", stderr)
	var conn apiFlags
	conn.register(fs)
	wait := fs.Bool("wait", false, "follow the job to its end: live progress on stderr, summary on stdout")
	asJSON := fs.Bool("json", false, "print JSON on stdout: {\"job_id\"}, or with --wait the final job status")
	detach := fs.Bool("detach", false, "with --wait, on Ctrl-C stop following and leave the job running (default: cancel it, then print the summary)")
	allowOutside := fs.Bool("allow-outside", false, "upload data files, file: sources and programs the job file names outside its own folder")
	vars := newSubmitVars(fs)
	args, code, ok := parseCommand(fs, args, 1, stderr)
	if !ok {
		return code
	}
	file := args[0]
	vars.dir = filepath.Dir(file)
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "tempest: read job file: %v\n", err)
		return exitUsage
	}
	if !*allowOutside {
		err = checkJobFilesInside(data, file, vars.options()...)
	}
	var dataFiles map[string][]byte
	if err == nil {
		dataFiles, err = readDataFiles(data, file, vars.options()...)
	}
	if err != nil {
		var jfe *jobfile.Error
		if errors.As(err, &jfe) {
			fmt.Fprintln(stderr, jfe.Error())
			return exitUsage
		}
		return reportError(stderr, err)
	}
	c, err := conn.client()
	if err != nil {
		return reportError(stderr, err)
	}
	defer c.Close()

	uploaded, err := uploadPipelineFiles(ctx, c, data, file, stderr, vars.options()...)
	if err != nil {
		return reportError(stderr, err)
	}
	id, err := c.SubmitWithBlobs(ctx, data, file, dataFiles, uploaded, vars.sent())
	if err != nil {
		if reportProblems(stderr, file, err) {
			return exitUsage
		}
		return reportError(stderr, err)
	}
	if !*wait {
		if *asJSON {
			printJSON(stdout, struct {
				JobID string `json:"job_id"`
			}{id})
		} else {
			fmt.Fprintln(stdout, id)
		}
		return exitOK
	}
	fmt.Fprintf(stderr, "submitted job %s\n", id)
	mode := outputSummary
	if *asJSON {
		mode = outputFinalJSON
	}
	return followJob(ctx, c, id, mode, interruptOf(*detach), stdout, stderr)
}

// readDataFiles parses the job file here, before anything is sent, reading
// the data files it names relative to it; it returns them by the names the
// job file uses, for the server, which parses the job file again against
// these alone. Parsing here also reports a bad job file, a missing data
// file or a column a step names but the file lacks without a round trip.
func readDataFiles(jobFile []byte, path string, opts ...jobfile.Option) (map[string][]byte, error) {
	files := map[string][]byte{}
	fromDisk := jobfile.DirDataFiles(filepath.Dir(path))
	read := func(name string) ([]byte, error) {
		b, err := fromDisk(name)
		if err == nil {
			files[name] = b
		}
		return b, err
	}
	if _, err := jobfile.Parse(jobFile, path, cliRegistry(filepath.Dir(path)), append(opts, jobfile.WithDataFiles(read))...); err != nil {
		return nil, err
	}
	return files, nil
}
