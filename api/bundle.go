package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"tempest/internal/jobfile"
	"tempest/workflow"
)

// A job file that names data files (an http workflow's data: {file: ...})
// is submitted as multipart/form-data: one part named FormJobFile holding
// the job file, and one part named FormDataFile per data file, whose
// filename parameter is the name exactly as the job file writes it
// ("data/users.csv"), since that is what the parser looks up. The server
// parses the job file against those parts alone and never touches its own
// disk. A job file without data files is sent as the plain body, as before.
//
// Two more parts carry what `tempest submit` fills in from its own
// environment: FormEnv, one per {{env.NAME}} the job file uses, and
// FormSecret, one per {{secret.NAME}}; each part's filename is the name, its
// body the value. They are read only while the job file is parsed: env
// values become part of the job, secrets go into the params of the
// workflows that use them (never into status, results or logs).
const (
	FormJobFile  = "job"
	FormDataFile = "data"
	FormEnv      = "env"
	FormSecret   = "secret"
	// FormTLSFile carries a file a workflow's tls: names (a CA bundle, a
	// client certificate, its key): filename the name as written, body the
	// bytes. Like a secret, it goes into the params and nowhere else.
	FormTLSFile = "tls_file"
)

// maxVarParts bounds the env and secret parts of one submission.
const maxVarParts = 256

// submission is what a submit request carries.
type submission struct {
	jobFile  []byte
	partName string
	data     map[string][]byte
	blobs    map[string]string
	// env and secrets are the values of {{env.NAME}} and {{secret.NAME}};
	// tlsFiles the files tls: names.
	env, secrets map[string]string
	tlsFiles     map[string][]byte
}

// SubmitVars are what SubmitWithBlobs sends beside a job file besides its
// data files: the values of its {{env.NAME}} and {{secret.NAME}}
// references, and the files its workflows' tls: names.
type SubmitVars struct {
	Env, Secrets map[string]string
	TLSFiles     map[string][]byte
}

// DefaultMaxBodyBytes fits the largest job file with the most data files
// it may ship, plus room for the multipart framing.
const DefaultMaxBodyBytes = jobfile.MaxFileSize + workflow.MaxDataSize + 64<<10

// maxDataParts bounds the data files of one submission; each costs a map
// entry and a part header, and a job file cannot name more than its
// workflows do.
const maxDataParts = jobfile.MaxWorkflows

// encodeBundle writes a job file and its data files as a multipart body and
// returns the body and its Content-Type.
func encodeBundle(jobFile []byte, filename string, data map[string][]byte) ([]byte, string, error) {
	return encodeBundleBlobs(jobFile, filename, data, nil, SubmitVars{})
}

// encodeBundleBlobs is encodeBundle with data files named by blob too, and
// env and secret values.
func encodeBundleBlobs(jobFile []byte, filename string, data map[string][]byte, blobs map[string]string, vars SubmitVars) ([]byte, string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part := func(field, name string, content []byte) error {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": field, "filename": name}))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		_, err = w.Write(content)
		return err
	}
	if filename == "" {
		filename = "job.yaml"
	}
	if err := part(FormJobFile, filename, jobFile); err != nil {
		return nil, "", fmt.Errorf("encode job file: %w", err)
	}
	names := make([]string, 0, len(data))
	for name := range data {
		names = append(names, name)
	}
	slices.Sort(names) // the same bytes on every retry and every run
	for _, name := range names {
		if err := part(FormDataFile, name, data[name]); err != nil {
			return nil, "", fmt.Errorf("encode data file %s: %w", name, err)
		}
	}
	names = names[:0]
	for name := range blobs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := part(FormDataBlob, name, []byte(blobs[name])); err != nil {
			return nil, "", fmt.Errorf("encode data blob %s: %w", name, err)
		}
	}
	for _, set := range []struct {
		field  string
		values map[string]string
	}{{FormEnv, vars.Env}, {FormSecret, vars.Secrets}} {
		for _, name := range slices.Sorted(maps.Keys(set.values)) {
			if err := part(set.field, name, []byte(set.values[name])); err != nil {
				// The error never holds the value: a secret's is one.
				return nil, "", fmt.Errorf("encode %s %s: %w", set.field, name, err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(vars.TLSFiles)) {
		if err := part(FormTLSFile, name, vars.TLSFiles[name]); err != nil {
			return nil, "", fmt.Errorf("encode tls file %s: %w", name, err)
		}
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("encode submission: %w", err)
	}
	return body.Bytes(), mw.FormDataContentType(), nil
}

// errBadBundle marks a multipart submission the server cannot use; the
// handler answers 400 with its message.
var errBadBundle = errors.New("malformed submission")

// readSubmission reads a job file and its data files from r: the plain
// body, or a multipart bundle (see FormJobFile). The body is already capped
// by the server's MaxBodyBytes.
//
// A FormDataBlob part names a data file uploaded as a blob instead: blobs
// maps the job file's name to the blob's hex SHA-256.
func readSubmission(r *http.Request) (submission, error) {
	sub, err := readSubmissionParts(r)
	if err != nil {
		return submission{}, err
	}
	for name, sum := range sub.blobs {
		if _, dup := sub.data[name]; dup {
			return submission{}, fmt.Errorf("%w: data file %q sent both as bytes and as a blob", errBadBundle, truncateName(name))
		}
		if len(sum) != 64 || strings.Trim(strings.ToLower(sum), "0123456789abcdef") != "" {
			return submission{}, fmt.Errorf("%w: data file %q: blob name is not a hex SHA-256", errBadBundle, truncateName(name))
		}
		sub.blobs[name] = strings.ToLower(sum)
	}
	return sub, nil
}

func readSubmissionParts(r *http.Request) (submission, error) {
	var (
		jobFile  []byte
		partName string
		data     map[string][]byte
		blobs    map[string]string
		env      map[string]string
		secrets  map[string]string
		tlsFiles map[string][]byte
	)
	mt, params, perr := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if perr != nil || mt != "multipart/form-data" {
		jobFile, err := io.ReadAll(r.Body)
		return submission{jobFile: jobFile}, err
	}
	if params["boundary"] == "" {
		return submission{}, fmt.Errorf("%w: multipart body without a boundary", errBadBundle)
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	seenJob := false
	for {
		// NextRawPart: the parts are bytes as sent, with no transfer
		// decoding applied.
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return submission{}, bundleErr(err)
		}
		// Part.FileName would strip directories, and the name must match
		// the job file's "data/users.csv".
		_, disp, derr := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if derr != nil {
			return submission{}, fmt.Errorf("%w: part Content-Disposition: %v", errBadBundle, derr)
		}
		content, err := io.ReadAll(p)
		if err != nil {
			return submission{}, bundleErr(err)
		}
		switch field, name := disp["name"], disp["filename"]; field {
		case FormJobFile:
			if seenJob {
				return submission{}, fmt.Errorf("%w: more than one %q part", errBadBundle, FormJobFile)
			}
			seenJob, jobFile, partName = true, content, name
		case FormDataBlob:
			switch {
			case name == "":
				return submission{}, fmt.Errorf("%w: a %q part without a filename", errBadBundle, FormDataBlob)
			case len(blobs) == maxDataParts:
				return submission{}, fmt.Errorf("%w: more than %d data blobs", errBadBundle, maxDataParts)
			}
			if _, dup := blobs[name]; dup {
				return submission{}, fmt.Errorf("%w: data blob %q sent twice", errBadBundle, truncateName(name))
			}
			if blobs == nil {
				blobs = map[string]string{}
			}
			blobs[name] = strings.TrimSpace(string(content))
		case FormDataFile:
			switch {
			case name == "":
				return submission{}, fmt.Errorf("%w: a %q part without a filename", errBadBundle, FormDataFile)
			case len(data) == maxDataParts:
				return submission{}, fmt.Errorf("%w: more than %d data files", errBadBundle, maxDataParts)
			}
			if _, dup := data[name]; dup {
				return submission{}, fmt.Errorf("%w: data file %q sent twice", errBadBundle, truncateName(name))
			}
			if data == nil {
				data = map[string][]byte{}
			}
			data[name] = content
		case FormEnv, FormSecret:
			set := &env
			if field == FormSecret {
				set = &secrets
			}
			switch {
			case name == "":
				return submission{}, fmt.Errorf("%w: a %q part without a filename", errBadBundle, field)
			case len(env)+len(secrets) == maxVarParts:
				return submission{}, fmt.Errorf("%w: more than %d env and secret parts", errBadBundle, maxVarParts)
			}
			if _, dup := (*set)[name]; dup {
				return submission{}, fmt.Errorf("%w: %s %q sent twice", errBadBundle, field, truncateName(name))
			}
			if *set == nil {
				*set = map[string]string{}
			}
			(*set)[name] = string(content)
		case FormTLSFile:
			switch {
			case name == "":
				return submission{}, fmt.Errorf("%w: a %q part without a filename", errBadBundle, field)
			case len(tlsFiles) == maxVarParts:
				return submission{}, fmt.Errorf("%w: more than %d tls files", errBadBundle, maxVarParts)
			}
			if _, dup := tlsFiles[name]; dup {
				return submission{}, fmt.Errorf("%w: tls file %q sent twice", errBadBundle, truncateName(name))
			}
			if tlsFiles == nil {
				tlsFiles = map[string][]byte{}
			}
			tlsFiles[name] = content
		default:
			return submission{}, fmt.Errorf("%w: unknown part %q (want %q and %q)", errBadBundle, truncateName(field), FormJobFile, FormDataFile)
		}
	}
	if !seenJob {
		return submission{}, fmt.Errorf("%w: no %q part holding the job file", errBadBundle, FormJobFile)
	}
	return submission{jobFile: jobFile, partName: partName, data: data, blobs: blobs, env: env, secrets: secrets, tlsFiles: tlsFiles}, nil
}

// bundleErr keeps a body-size error as it is (the handler answers 413 for
// it) and marks anything else as a malformed bundle.
func bundleErr(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return fmt.Errorf("%w: %v", errBadBundle, err)
}

func truncateName(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
