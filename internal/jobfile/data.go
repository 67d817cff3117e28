package jobfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"tempest/workflow"
)

// Option adjusts Parse.
type Option func(*options)

type options struct {
	readData workflow.DataReader
	blobs    map[string]string
	env      EnvLookup
	secrets  workflow.SecretLookup
	readTLS  workflow.DataReader
}

// WithTLSFiles makes Parse read the CA, certificate and key files a
// workflow's tls: names through read (from disk beside the job file on the
// client; from the submission's parts on a server). Without it naming one
// is a problem at its line.
func WithTLSFiles(read workflow.DataReader) Option {
	return func(o *options) { o.readTLS = read }
}

// WithSecrets gives workflow types the values of the {{secret.NAME}}
// references they find. Secrets are not substituted into the file: a type
// carries the values apart from the text (the http type in its params,
// rendered only on the worker), so no message about the file can show one.
func WithSecrets(lookup workflow.SecretLookup) Option {
	return func(o *options) { o.secrets = lookup }
}

// WithDataBlobs names the data files that were uploaded as blobs (the job
// file's name → hex SHA-256). Parse still reads and checks their text
// through the DataReader, then leaves only the blob's name in the params,
// so every shard shares the one stored copy.
func WithDataBlobs(blobs map[string]string) Option {
	return func(o *options) { o.blobs = blobs }
}

// WithDataFiles makes Parse read the data files a job file names (an http
// workflow's data: {file: ...}) through read. Without it a job file that
// names one gets a problem at that line.
func WithDataFiles(read workflow.DataReader) Option {
	return func(o *options) { o.readData = read }
}

// DirDataFiles reads data files from disk, a relative name relative to dir
// (the job file's directory, as people expect of paths written in a file).
// It reads at most one byte past workflow.MaxDataSize, so naming a huge
// file costs little before the parser refuses it.
func DirDataFiles(dir string) workflow.DataReader {
	return func(name string) ([]byte, error) {
		path := name
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, filepath.FromSlash(name))
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err // *PathError: names the path tried
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return nil, fmt.Errorf("%s is a directory", path)
		}
		b, err := io.ReadAll(io.LimitReader(f, workflow.MaxDataSize+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return b, nil
	}
}

// ErrDataFileNotSent is what MapDataFiles returns (wrapped) for a name it
// does not hold.
var ErrDataFileNotSent = errors.New("not sent with the job file (tempest submit sends the data files a job file names)")

// MapDataFiles serves data files from memory, by the names the job file
// uses: the API server's reader over the files a client uploaded with a
// job file. A nil map holds none.
func MapDataFiles(files map[string][]byte) workflow.DataReader {
	return func(name string) ([]byte, error) {
		b, ok := files[name]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: name, Err: ErrDataFileNotSent}
		}
		return b, nil
	}
}
